"""The episode store under real faults: a write cut short by a full disk, a second writing process,
a holder killed by SIGKILL, a resume onto another system's or another schema version's episodes."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from executor_sft.schema import Episode, Question
from executor_sft.store import (
    EpisodeStore,
    StoreWriteError,
    SystemChangedError,
    read_episodes,
    system_file,
)
from executor_sft.store_lock import StoreLockedError, lock_path

pytestmark = pytest.mark.faults


def _episode(i: int, padding: int = 100) -> Episode:
    q = Question(id=f"q{i}", question=f"question {i}?", golden_answers=["a"])
    return Episode(episode_id=f"q{i}#0", question=q, answer="a" * padding)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().decode("utf-8").splitlines()]


def test_a_write_a_full_disk_cuts_short_is_cut_back_before_the_next_append(tmp_path, monkeypatch):
    """ENOSPC after 5,000 of a batch's bytes: those bytes go, the next batch starts on a line of its own."""
    path = tmp_path / "rollouts.jsonl"
    real_write = os.write
    budget: dict[str, int | None] = {"left": None}

    def filling_disk(fd: int, data) -> int:
        if budget["left"] is None or fd < 3:
            return real_write(fd, data)
        if budget["left"] == 0:
            budget["left"] = None  # the disk frees: the next write goes through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data[: budget["left"]]))
        budget["left"] -= n
        return n

    with EpisodeStore(path) as store:
        assert store.append_many([_episode(0), _episode(1)]) == 2
        before = path.read_bytes()
        monkeypatch.setattr(os, "write", filling_disk)
        budget["left"] = 5_000
        with pytest.raises(StoreWriteError, match=r"writing \d+ bytes failed \(No space left on device\)"):
            store.append_many([_episode(i, padding=3_000) for i in range(2, 5)])
        assert path.read_bytes() == before  # the partial bytes are gone at once
        assert store.completed_ids() == {"q0#0", "q1#0"}
        assert store.append_many([_episode(2), _episode(5)]) == 2
    records = _lines(path)
    assert [r["episode_id"] for r in records] == ["q0#0", "q1#0", "q2#0", "q5#0"]
    assert EpisodeStore(path).completed_ids() == {r["episode_id"] for r in records}


HOLDER = textwrap.dedent(
    """
    import sys
    from executor_sft.store import EpisodeStore
    store = EpisodeStore(sys.argv[1])
    print("holding", flush=True)
    sys.stdin.readline()  # hold the store until the test closes stdin
    store.close()
    """
)


WAITER = textwrap.dedent(
    """
    import logging, sys
    from executor_sft.schema import Episode, Question
    from executor_sft.store import EpisodeStore
    logging.basicConfig()
    q = Question(id="q9", question="question 9?", golden_answers=["a"])
    with EpisodeStore(sys.argv[1], wait_for_lock=True) as store:
        store.append(Episode(episode_id="q9#0", question=q))
    print("wrote")
    """
)


def _holder(path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "holding\n"
    return proc


def test_a_second_writer_is_refused_naming_the_holder_or_waits_for_it(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    holder = _holder(path)
    try:
        with pytest.raises(
            StoreLockedError, match=rf"{path}: another process \(pid {holder.pid}\) is writing it"
        ):
            EpisodeStore(path)
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=3)  # still waiting for the holder
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0 and out == "wrote\n", err
        assert f"waiting for pid {holder.pid}" in err
    finally:
        holder.kill()
    assert [r["episode_id"] for r in read_episodes(path)] == ["q9#0"]
    assert not lock_path(path).exists()  # a clean release removes the lock file


def test_a_holder_killed_by_sigkill_leaves_no_lock_behind(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    holder = _holder(path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    assert lock_path(path).read_text().strip() == str(holder.pid)  # the stale file stays ...
    with EpisodeStore(path) as store:  # ... and blocks nobody
        assert store.append(_episode(0))


SYSTEM = {"models": {"backbone": {"model": "a"}}, "pipeline": {"max_rounds": 4}}


def test_a_resume_with_a_changed_system_is_refused_naming_what_changed(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    with EpisodeStore(path, system=SYSTEM) as store:
        store.append(_episode(0))
    before = path.read_bytes()
    changed = {"models": {"backbone": {"model": "b"}}, "pipeline": {"max_rounds": 3}}
    with pytest.raises(
        SystemChangedError,
        match=r'different system \(changed: models\.backbone\.model: "a" -> "b"; pipeline\.max_rounds: 4 -> 3\)',
    ):
        EpisodeStore(path, system=changed)
    assert path.read_bytes() == before and not lock_path(path).exists()
    with EpisodeStore(path, system=SYSTEM) as store:  # the same system resumes
        assert store.append(_episode(1))
    with EpisodeStore(path, system=changed, accept_system_change=True) as store:
        assert store.append(_episode(2))
    record = json.loads(system_file(path).read_text())
    assert record["system"] == changed
    assert record["accepted_changes"][0]["changed"] == [
        'models.backbone.model: "a" -> "b"',
        "pipeline.max_rounds: 4 -> 3",
    ]
    assert record["accepted_changes"][0]["previous"]["pipeline"] == SYSTEM["pipeline"]
    path.unlink()  # the episodes are gone, so a stale record refuses nothing
    with EpisodeStore(path, system=SYSTEM) as store:
        assert store.append(_episode(0))
    assert json.loads(system_file(path).read_text()) == {
        "schema": "executor_sft.episode/v1",
        "system": SYSTEM,
    }


def test_a_resume_onto_episodes_of_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    record = dict(_episode(0).to_dict(), schema="executor_sft.episode/v9")
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(
        SystemChangedError, match=r'changed: schema: "executor_sft.episode/v9" -> "executor_sft.episode/v1"'
    ):
        EpisodeStore(path, system=SYSTEM)
    assert path.read_bytes() == before and not system_file(path).exists()


def test_a_store_that_cannot_be_opened_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreWriteError, match=r"cannot open for writing \(Not a directory\)"):
        EpisodeStore(tmp_path / "file" / "out" / "rollouts.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(StoreWriteError, match=r"dir.jsonl: cannot open for writing \(Is a directory\)"):
        EpisodeStore(tmp_path / "dir.jsonl")
