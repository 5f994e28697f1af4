"""The episode runner on a real store: skips finished ids, group commit, failures left for a re-run
with their attempts bounded across resumes."""

from __future__ import annotations

import asyncio
import json
import os

from executor_sft.episode_runner import WorkItem, attempts_path, run_episodes, work_items
from executor_sft.schema import Episode, Question
from executor_sft.store import EpisodeStore, read_episodes

QUESTIONS = [Question(id=f"q{i}", question=f"question {i}?", golden_answers=["a"]) for i in range(4)]


def _episode(item: WorkItem) -> Episode:
    return Episode(episode_id=item.episode_id, question=item.question, sample_index=item.sample)


def test_work_items_are_questions_by_samples_by_drivers_in_order():
    items = work_items(QUESTIONS[:2], 2, drivers=["a", "b"])
    assert [i.episode_id for i in items[:4]] == ["q0#0@a", "q0#0@b", "q0#1@a", "q0#1@b"]
    assert len(items) == 8 and [i.episode_id for i in work_items(QUESTIONS[:1], 2)] == ["q0#0", "q0#1"]


def test_skips_finished_ids_and_leaves_failures_for_the_rerun(tmp_path):
    items = work_items(QUESTIONS, 2)
    path = tmp_path / "episodes.jsonl"
    with EpisodeStore(path) as store:
        store.append(_episode(items[0]))
    broken = {items[3].episode_id}
    started: list[str] = []
    written: list[str] = []

    async def run_one(item: WorkItem) -> Episode:
        started.append(item.episode_id)
        await asyncio.sleep(0)
        if item.episode_id in broken:
            raise RuntimeError("boom")
        return _episode(item)

    def run(skip: set[str]):
        with EpisodeStore(path) as store:
            return asyncio.run(
                run_episodes(
                    items,
                    run_one,
                    store,
                    concurrency=3,
                    skip_ids=skip,
                    on_written=lambda e: written.append(e.episode_id),
                )
            )

    report = run({items[1].episode_id})
    assert (report.written, report.skipped) == (5, 2)
    assert report.failed == [(items[3].episode_id, "RuntimeError: boom")]
    assert started == [i.episode_id for i in items[2:]]  # started in order
    assert sorted(written) == sorted(i.episode_id for i in items[2:] if i.episode_id not in broken)
    broken.clear()
    started.clear()
    again = run(set())
    assert (again.written, again.skipped, again.failed) == (2, 6, [])
    assert started == [items[1].episode_id, items[3].episode_id]
    ids = [e["episode_id"] for e in read_episodes(path)]
    assert sorted(ids) == sorted(i.episode_id for i in items) and len(ids) == len(set(ids))


def test_episodes_finished_together_share_one_fsync(tmp_path, monkeypatch):
    items = work_items(QUESTIONS, 2)
    gate = asyncio.Event()
    in_flight = peak = 0

    async def run_one(item: WorkItem) -> Episode:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == len(items):
            gate.set()
        await gate.wait()
        in_flight -= 1
        return _episode(item)

    path = tmp_path / "episodes.jsonl"
    fsync = os.fsync
    synced: list[int] = []

    def counting_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with EpisodeStore(path) as store:
        report = asyncio.run(run_episodes(items, run_one, store, concurrency=len(items)))
    assert report.written == len(items) and peak == len(items)
    assert synced.count(path.stat().st_ino) == 1


def test_concurrency_bounds_the_episodes_in_flight_and_a_failed_write_is_reported(tmp_path, monkeypatch):
    items = work_items(QUESTIONS, 2)
    in_flight = peak = 0

    async def run_one(item: WorkItem) -> Episode:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return _episode(item)

    def full_disk(records):
        raise OSError(28, "No space left on device")

    with EpisodeStore(tmp_path / "episodes.jsonl") as store:
        monkeypatch.setattr(store, "append_many", full_disk)
        report = asyncio.run(run_episodes(items, run_one, store, concurrency=3))
    assert peak == 3 and report.written == 0
    assert sorted(eid for eid, _ in report.failed) == sorted(i.episode_id for i in items)
    assert all(err.startswith("write: OSError") for _, err in report.failed)


def test_failed_attempts_are_bounded_across_resumes_then_stored_as_a_final_error(tmp_path):
    items = work_items(QUESTIONS[:2], 1)
    path = tmp_path / "episodes.jsonl"
    down = {items[1].episode_id}

    async def run_one(item: WorkItem) -> Episode:
        if item.episode_id in down:
            raise ConnectionError("endpoint down")
        return _episode(item)

    def run():
        with EpisodeStore(path) as store:
            return asyncio.run(run_episodes(items, run_one, store, concurrency=2, max_attempts=2))

    first = run()
    assert (first.written, first.failed, first.gave_up) == (
        1,
        [(items[1].episode_id, "ConnectionError: endpoint down")],
        [],
    )
    assert [e["episode_id"] for e in read_episodes(path)] == [items[0].episode_id]  # not stored as finished
    log = attempts_path(path)
    assert [json.loads(line)["attempt"] for line in log.read_text().splitlines()] == [1]
    second = run()  # the bound holds across resumes: the second failure is the last allowed
    assert second.failed == [] and [eid for eid, _ in second.gave_up] == [items[1].episode_id]
    final = [e for e in read_episodes(path) if e["episode_id"] == items[1].episode_id]
    assert len(final) == 1 and final[0]["stop_reason"] == "error" and final[0]["attempts"] == 2
    assert "gave up after 2 failed attempts" in final[0]["error"] and "endpoint down" in final[0]["error"]
    third = run()
    assert (third.written, third.skipped, third.failed) == (0, 2, [])


def test_a_recovered_episode_is_stored_as_it_ran(tmp_path):
    items = work_items(QUESTIONS[:1], 1)
    path = tmp_path / "episodes.jsonl"
    outage = [True]

    async def run_one(item: WorkItem) -> Episode:
        if outage[0]:
            raise TimeoutError("read timed out")
        return _episode(item)

    with EpisodeStore(path) as store:
        assert asyncio.run(run_episodes(items, run_one, store, concurrency=1)).unfinished == 1
    outage[0] = False
    with EpisodeStore(path) as store:
        report = asyncio.run(run_episodes(items, run_one, store, concurrency=1))
    assert (report.written, report.unfinished) == (1, 0)
    (stored,) = read_episodes(path)
    assert stored["stop_reason"] == "stopped" and "attempts" not in stored


def test_failures_in_a_row_halt_the_run_before_every_attempt_is_spent(tmp_path):
    items = work_items(QUESTIONS, 3)
    started: list[str] = []

    async def run_one(item: WorkItem) -> Episode:
        started.append(item.episode_id)
        raise ConnectionRefusedError("connection refused")

    with EpisodeStore(tmp_path / "episodes.jsonl") as store:
        report = asyncio.run(run_episodes(items, run_one, store, concurrency=1, halt_after=3))
    assert len(started) == 3 and len(report.failed) == 3
    assert report.not_started == [i.episode_id for i in items[3:]] and report.unfinished == len(items)
    assert not attempts_path(tmp_path / "episodes.jsonl").read_text().count("q1#0")
