"""The fault harness's checker (tests/cluster/checker.py) on histories written by hand: it must
catch a stale read, excuse one only while a fault and the bound after it last, and judge region
B by when its replica replayed a write. Needs no namespaces."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker  # noqa: E402

REGIONS = {"a1": "A", "b1": "B"}


def logs(tmp_path, writes, reads):
    (tmp_path / "a1-w0.log").write_text("".join(f"W {k} {v} {t}\n" for k, v, t in writes))
    (tmp_path / "a1-r0.log").write_text("".join(f"R {k} {t} {v} h\n" for k, t, v in reads if t < 1000))
    (tmp_path / "b1-r0.log").write_text("".join(f"R {k} {t - 1000} {v} h\n" for k, t, v in reads if t >= 1000))
    return tmp_path


def test_a_read_older_than_a_write_past_the_bound_is_caught_with_its_history(tmp_path):
    out = logs(tmp_path, [(7, 1, 10.0), (7, 2, 20.0)],
               [(7, 10.5, 0), (7, 11.5, 1), (7, 20.9, 1), (7, 21.2, 1), (7, 21.3, -1), (7, 21.4, "E")])
    verdict = checker.check(out, REGIONS, [], bound=1.0, stall=None)
    assert verdict["writes"] == 2 and verdict["reads"] == 6 and verdict["read_errors"] == 1
    assert verdict["inconsistent_reads"] == 1, verdict  # only 21.2 returning 1: past 20 + 1 s
    history = verdict["inconsistent_keys"][7]
    assert history["writes"] == [(1, 10.0), (2, 20.0)]
    assert history["bad_reads"][0]["returned"] == 1 and history["bad_reads"][0]["expected_at_least"] == 2
    assert verdict["inconsistent_per_million_writes"] == 500000.0


def test_a_fault_excuses_reads_until_its_end_plus_the_bound_and_strict_counts_them(tmp_path):
    out = logs(tmp_path, [(3, 1, 10.0)], [(3, 12.0, 0), (3, 15.5, 0), (3, 16.5, 0)])
    verdict = checker.check(out, REGIONS, [], bound=1.0, faults=[(10.5, 15.0)], stall=None)
    assert verdict["strict_inconsistent_reads"] == 3
    assert verdict["inconsistent_reads"] == 1  # 16.5: after the fault's end + 1 s


def test_region_b_sees_a_write_once_its_replica_replayed_it(tmp_path):
    # Replayed (a commit stamped at or after the write's acknowledgement) at 13.0.
    polls = [(11.0, 9.0), (12.0, 9.5), (13.0, 10.2), (14.0, 10.3)]
    out = logs(tmp_path, [(5, 1, 10.0)], [(5, 1013.5, 0), (5, 1014.1, 0)])
    verdict = checker.check(out, REGIONS, polls, bound=1.0, stall=None)
    assert verdict["inconsistent_reads"] == 1
    assert verdict["inconsistent_keys"][5]["bad_reads"][0]["start"] == 14.1


def test_a_machine_stall_is_a_fault_found_in_the_logs_and_nothing_else_is(tmp_path):
    # Operations every 0.1 s from 0 to 30 s, none from 12.0 to 14.5 (every process
    # descheduled); a write at 11.5 read stale at 14.6 (within the stall's end + 1 s: excused)
    # and at 16.0 (past it: caught); with no stall, the 14.6 read is caught too.
    times = [round(0.1 * i, 1) for i in range(301) if not 12.0 < 0.1 * i < 14.5]
    reads = [(1, t, 1) for t in times if t != 11.5] + [(9, 14.6, 0), (9, 16.0, 0)]
    out = logs(tmp_path, [(9, 1, 11.5)], reads)
    verdict = checker.check(out, REGIONS, [], bound=1.0)
    assert verdict["machine_stalls"] == [{"kind": "stall", "what": "machine stall (no worker ran)", "hosts": [],
                                          "start": 12.0, "end": 14.5}]
    assert [b["start"] for b in verdict["inconsistent_keys"][9]["bad_reads"]] == [16.0]
    assert verdict["strict_inconsistent_reads"] == 2
    assert checker.check(out, REGIONS, [], bound=1.0, stall=None)["inconsistent_reads"] == 2


def test_availability_leaves_out_a_faulted_host_while_its_fault_lasts(tmp_path):
    out = logs(tmp_path, [], [(1, 10.0, 0), (1, 11.0, "E"), (1, 12.0, "E"), (1, 13.0, 0)])
    assert checker.availability(out, REGIONS, [(10.5, 11.5, {"a1"})]) == [
        {"minute": 0, "reads": 3, "answered_share": 0.66667}]


def test_unanswered_reads_are_told_by_the_fault_last_begun_outside_its_host(tmp_path):
    out = logs(tmp_path, [], [(1, 10.0, "E"), (1, 10.2, "E"), (1, 11.0, 0), (1, 12.5, "E"), (1, 1020.0, "E")])
    faults = [(9.5, 12.0, {"b1"}, "router b1"), (19.0, 21.0, {"b1"}, "host b1")]
    assert checker.unanswered_by_fault(out, REGIONS, faults) == [
        {"fault": "router b1", "when": "during", "reader": "h", "reads": 2},
        {"fault": "router b1", "when": "after", "reader": "h", "reads": 1}]
