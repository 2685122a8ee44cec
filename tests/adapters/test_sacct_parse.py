"""The sacct parser on lines in the exact format ``sacct -X -P -n --noconvert
--format=JobID,Cluster,User,Account,Partition,QOS,State,Start,End,ElapsedRaw,AllocTRES``
prints (Slurm 22.05, TZ=UTC, SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cheeto_like.adapters.sacct import (
    FIELDS,
    FINISHED_STATES,
    AllocTRES,
    ParsedOutput,
    Sacct,
    SacctParseError,
    parse_line,
    parse_mem_mb,
    parse_output,
    parse_time,
    parse_tres,
)

LINE = ("42|farm|alice|lab|gpu|normal|COMPLETED|2026-11-30T10:00:00|2026-11-30T10:30:00|1800|"
        "billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=400M,node=1")


def test_a_typed_gpu_job_parses_every_field():
    job = parse_line(LINE)
    assert (job.cluster, job.job_id, job.user, job.account, job.partition, job.qos,
            job.state) == ("farm", "42", "alice", "lab", "gpu", "normal", "COMPLETED")
    assert job.start == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert job.end == datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    assert job.elapsed_s == 1800
    assert job.tres == AllocTRES(cpus=4, mem_mb=400, gpus=(("a100", 2),))


@pytest.mark.parametrize("job_id", ["123", "123_4", "123+1", "123_4+0", "7_1000"])
def test_array_and_het_job_ids_are_kept_as_printed(job_id):
    job = parse_line(LINE.replace("42|", f"{job_id}|", 1))
    assert job.job_id == job_id
    assert job.array_job == job_id.split("_")[0].split("+")[0]


@pytest.mark.parametrize("job_id", ["123_[1-5]", "123.batch", "abc", "", "123_"])
def test_unfinished_array_ranges_steps_and_junk_ids_are_refused(job_id):
    with pytest.raises(SacctParseError, match="bad JobID"):
        parse_line(LINE.replace("42|", f"{job_id}|", 1))


def test_untyped_gpus_alone_have_no_type():
    assert parse_tres("cpu=2,gres/gpu=2,mem=1G,node=1").gpus == ((None, 2),)


def test_untyped_total_beyond_the_typed_entries_adds_the_rest_untyped():
    assert parse_tres("cpu=1,gres/gpu:t4=1,gres/gpu=3").gpus == (("t4", 1), (None, 2))


def test_two_gpu_types_are_both_kept_sorted():
    tres = parse_tres("cpu=8,gres/gpu:t4=1,gres/gpu:a100=2,gres/gpu=3,node=1")
    assert tres.gpus == (("a100", 2), ("t4", 1))
    assert tres.gpu_count == 3


def test_other_tres_are_ignored_and_an_empty_alloc_is_zero():
    assert parse_tres("billing=9,energy=100,fs/disk=5,gres/gpumem=40G,license/matlab=1,node=1"
                      ) == AllocTRES(cpus=0)
    assert parse_tres("") == AllocTRES()


@pytest.mark.parametrize(("text", "mb"), [("400M", 400), ("2G", 2048), ("1.5G", 1536),
                                          ("1T", 1048576), ("2048K", 2), ("100", 100)])
def test_memory_units(text, mb):
    assert parse_mem_mb(text) == mb


@pytest.mark.parametrize("tres", ["cpu=x", "cpu", "gres/gpu:=2", "mem=lots", "gres/gpu=-1"])
def test_bad_tres_entries_are_errors(tres):
    with pytest.raises(SacctParseError):
        parse_tres(tres)


def test_a_job_cancelled_before_it_started_has_no_start_and_no_charge():
    line = "77|farm|bob|lab|cpu|normal|CANCELLED by 0|None|2026-11-30T11:00:00|0|"
    job = parse_line(line)
    assert job.start is None and job.elapsed_s == 0 and job.state == "CANCELLED"
    assert job.tres == AllocTRES()


@pytest.mark.parametrize(("text", "expected"), [
    ("Unknown", None), ("None", None), ("", None),
    ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("1767225600", datetime(2026, 1, 1, tzinfo=UTC)),
])
def test_times(text, expected):
    assert parse_time(text, "End") == expected


def test_a_job_without_an_end_is_not_finished():
    with pytest.raises(SacctParseError, match="no End"):
        parse_line(LINE.replace("2026-11-30T10:30:00", "Unknown"))


def test_bad_lines_are_reported_with_their_number_and_the_rest_is_kept():
    text = "\n".join([LINE, "garbage", "", LINE.replace("42|", "43|", 1),
                      LINE.replace("|1800|", "|soon|")]) + "\n"
    parsed = parse_output(text)
    assert [j.job_id for j in parsed.jobs] == ["42", "43"]
    assert parsed.skipped == ("line 2: 1 fields, expected 11", "line 5: bad ElapsedRaw 'soon'")


def test_a_user_name_with_a_pipe_would_shift_fields_and_is_refused():
    with pytest.raises(SacctParseError, match="12 fields"):
        parse_line(LINE.replace("alice", "al|ice"))


def test_the_command_line_names_every_flag_the_parser_relies_on():
    argv = Sacct(binary="/usr/bin/sacct").argv(
        "farm", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, 6, tzinfo=UTC))
    assert argv[1:7] == ["-X", "-P", "-n", "-a", "--noconvert", "--clusters=farm"]
    assert f"--format={','.join(FIELDS)}" in argv
    assert f"--state={','.join(FINISHED_STATES)}" in argv
    assert "--starttime=2026-11-01T00:00:00" in argv and "--endtime=2026-11-02T06:00:00" in argv
    env = Sacct()._env()
    assert env["TZ"] == "UTC" and env["SLURM_TIME_FORMAT"] == "%Y-%m-%dT%H:%M:%S"


def test_an_array_cancelled_before_any_element_started_is_neither_a_job_nor_skipped():
    """One record ``12_[0-11]`` for the elements that never ran (issue 26's held arrays):
    nothing to charge, and nothing for an admin to look at."""
    text = ("12_[0-11%2]|farm|alice|lab|cpu|normal|CANCELLED by 0|None|"
            "2026-12-05T10:00:00|0|\n")
    assert parse_output(text) == ParsedOutput((), ())
