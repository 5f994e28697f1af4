import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from executor_sft.errors import MalformedLineError
from executor_sft.schema import Episode, Question
from executor_sft.store import EpisodeStore, iter_episodes_by_id, read_episodes


def _episode(i: int, padding: int = 0) -> Episode:
    q = Question(id=f"q{i}", question=f"question {i}?", golden_answers=["a"])
    return Episode(episode_id=f"q{i}#0", question=q, answer="a" * padding)


def test_append_resume_and_no_duplicates(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    with EpisodeStore(path) as store:
        assert store.append(_episode(0))
        assert store.append(_episode(1))
        assert not store.append(_episode(1))
    reopened = EpisodeStore(path)
    assert reopened.completed_ids() == {"q0#0", "q1#0"}
    assert not reopened.append(_episode(0))
    episodes = list(reopened)
    assert [e.episode_id for e in episodes] == ["q0#0", "q1#0"]
    assert episodes[0].to_dict()["schema"] == "executor_sft.episode/v1"


def test_truncated_last_line_is_recovered(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    with EpisodeStore(path) as store:
        store.append(_episode(0))
        store.append(_episode(1))
    with path.open("a") as fh:
        fh.write(_episode(2).to_json()[:40])  # a writer killed mid-line
    assert [e["episode_id"] for e in read_episodes(path)] == ["q0#0", "q1#0"]
    store = EpisodeStore(path)
    assert store.completed_ids() == {"q0#0", "q1#0"}
    assert store.append(_episode(2))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["episode_id"] for line in lines] == ["q0#0", "q1#0", "q2#0"]


WRITER = textwrap.dedent(
    """
    import sys
    from executor_sft.store import EpisodeStore
    from executor_sft.schema import Episode, Question
    store = EpisodeStore(sys.argv[1])
    i = 0
    while True:
        q = Question(id=f"q{i}", question="x?", golden_answers=["a"])
        # large records make a kill in the middle of a write likely
        store.append(Episode(episode_id=f"q{i}#0", question=q, answer="a" * 200_000))
        i += 1
    """
)


def test_store_survives_sigkill_mid_write(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
        deadline = time.time() + 60
        while time.time() < deadline and (
            not path.exists() or path.stat().st_size < (attempt + 1) * 2_000_000
        ):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        store = EpisodeStore(path)  # recovery on open, then resume appends
        ids = [json.loads(line)["episode_id"] for line in path.read_text().splitlines()]
        assert len(ids) == len(set(ids)), "a complete record was duplicated"
        assert set(ids) == store.completed_ids()
        store.close()
    assert len(ids) >= 3
    assert all(len(json.loads(line)["answer"]) == 200_000 for line in path.read_text().splitlines())


def test_episode_lines_hold_the_same_json_values_as_to_dict(tmp_path):
    """Episodes are written by pydantic-core, dicts by json.dumps: the values must agree."""
    from executor_sft.schema import ExecutorRun, Usage

    episode = _episode(0)
    episode.answer = "Zoë — “quoted” \u2028 ✓"
    run = ExecutorRun(
        run_id="q0#0/r0/q0/teacher",
        round=0,
        sub_query_index=0,
        sub_query="who?",
        role="teacher",
        model="m",
        max_turns=3,
        max_searches=2,
        usage=Usage(calls=1),
    )
    run.calls = [{"latency_s": 0.00001, "error": None}]  # extra field, tiny float
    episode.runs.append(run)
    path = tmp_path / "rollouts.jsonl"
    with EpisodeStore(path) as store:
        store.append(episode)
        store.append(dict(episode.to_dict(), episode_id="q0#1"))
    from_model, from_dict = (json.loads(line) for line in path.read_bytes().decode("utf-8").split("\n")[:2])
    assert from_model == dict(from_dict, episode_id="q0#0")
    assert from_model["runs"][0]["calls"][0]["latency_s"] == 0.00001
    assert from_model["answer"] == episode.answer


def test_check_jsonl_names_a_damaged_middle_line_and_allows_a_torn_tail(tmp_path):
    from executor_sft.store import check_jsonl

    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"episode_id": "a"}\n{"episode_id": "b"\n{"episode_id": "c"}\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: invalid JSON")):
        check_jsonl(path)
    path.write_bytes(b'{"episode_id": "a"}\n{"episode_id": "b"}\n{"episode_')
    assert check_jsonl(path) == 3
    assert check_jsonl(tmp_path / "absent.jsonl") == 0


def _write_lines(path, lines: list[str]) -> None:
    path.write_text("".join(lines), encoding="utf-8")


def test_episodes_by_id_come_in_id_order_with_their_file_lines(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    _write_lines(
        path,
        [
            '{"episode_id": "q2#0", "n": 1}\n',
            "\n",
            '{"episode_id": "q1#0", "n": 2}\n',
            '{"episode_id": "q2#0", "n": 3}\n',  # a repeated id keeps its file order
            '{"question": "no id", "n": 4}\n',  # no id: first, for the filter to report
            '{"episode_id": "q10#0", "n": 5}\n',
        ],
    )
    located = list(iter_episodes_by_id(path))
    assert [(loc.where, loc.record["n"]) for loc in located] == [
        (f"{path}:5", 4),
        (f"{path}:3", 2),
        (f"{path}:6", 5),  # string order: "q1#0" < "q10#0" < "q2#0"
        (f"{path}:1", 1),
        (f"{path}:4", 3),
    ]


def test_episodes_by_id_skip_a_torn_tail_and_name_a_damaged_line(tmp_path, caplog):
    torn = tmp_path / "torn.jsonl"
    _write_lines(torn, ['{"episode_id": "b"}\n', '{"episode_id": "a"}\n', '{"episode_id": "c", "ru'])
    with caplog.at_level("WARNING"):
        assert [loc.record["episode_id"] for loc in iter_episodes_by_id(torn)] == ["a", "b"]
    assert f"{torn}:3: skipping an unfinished last line" in caplog.text
    damaged = tmp_path / "damaged.jsonl"
    _write_lines(damaged, ['{"episode_id": "b"}\n', "{not json\n", '{"episode_id": "a"}\n'])
    episodes = iter_episodes_by_id(damaged)
    with pytest.raises(MalformedLineError, match=re.escape(f"{damaged}:2: invalid JSON")):
        next(episodes)  # the first pass reads every line: nothing is yielded before the error
    _write_lines(damaged, ['{"episode_id": "b"}\n', "[1, 2]\n"])
    with pytest.raises(MalformedLineError, match=re.escape(f"{damaged}:2: expected a JSON object")):
        list(iter_episodes_by_id(damaged))
