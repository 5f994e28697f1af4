"""The episode runner on a real store: skips finished ids, group commit, failures left for a re-run."""

from __future__ import annotations

import asyncio
import os

from executor_sft.episode_runner import WorkItem, run_episodes, work_items
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
