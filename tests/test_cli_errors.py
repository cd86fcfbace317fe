"""Bad input gives one clear line that names the file and what is wrong, and a non-zero exit."""
import gzip
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

GOOD = os.path.join(ptest.KINETO, "compare_pair", "base.json.gz")


class CliErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_errors_")

    def path(self, name, data):
        p = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def assertOneLineError(self, args, must_contain):
        p = ptest.run(args)
        self.assertNotEqual(p.returncode, 0, f"{args}: exit 0\n{p.stdout}")
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"{args}: expected one line, got:\n{p.stderr}")
        for word in must_contain:
            self.assertIn(word, lines[0])
        self.assertTrue(lines[0].startswith("perftracker: error:"), lines[0])
        return lines[0]

    def test_json_output_never_overwrites_an_input(self):
        # `show --json TRACE TRACE2` reads TRACE as --json's FILE: refused, TRACE untouched.
        trace = self.path("keep/rank-0.json", b'{"traceEvents": [{"ph": "X", "name": "a", '
                          b'"cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}')
        with open(trace, "rb") as f:
            before = f.read()
        for cmd in (["show", "--json", trace, trace], ["analyze", trace, "--json", trace],
                    ["diff", trace, trace, "--json", trace]):
            line = self.assertOneLineError(cmd, [trace, "would overwrite an input"])
        with open(trace, "rb") as f:
            self.assertEqual(f.read(), before)

    def test_truncated_gzip(self):
        with open(GOOD, "rb") as f:
            data = f.read()
        p = self.path("trunc/rank-0.json.gz", data[: len(data) // 2])
        self.assertOneLineError(["analyze", p], ["rank-0.json.gz", "gzip"])

    def test_malformed_json(self):
        p = self.path("bad/rank-0.json", b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": }]}')
        self.assertOneLineError(["analyze", p], ["rank-0.json"])

    def test_wrong_top_level_type(self):
        p = self.path("type/rank-0.json", b'"just a string"')
        self.assertOneLineError(["analyze", p], ["rank-0.json"])

    def test_empty_file(self):
        p = self.path("empty/rank-0.json", b"")
        self.assertOneLineError(["analyze", p], ["rank-0.json", "empty"])

    def test_missing_file(self):
        self.assertOneLineError(["analyze", os.path.join(self.tmp, "nope.json")], ["nope.json"])

    def test_folder_without_traces(self):
        d = os.path.join(self.tmp, "nothing")
        os.makedirs(d, exist_ok=True)
        self.assertOneLineError(["analyze", d], ["nothing"])

    def test_export_fr_without_dumps_or_into_an_earlier_export(self):
        d = os.path.join(self.tmp, "no_dumps")
        os.makedirs(d, exist_ok=True)
        out = os.path.join(self.tmp, "fr_out")
        self.assertOneLineError(["export-fr", d, "-o", out], ["no_dumps", "no Flight Recorder dump"])
        dumps = os.path.join(ptest.SOURCE, "tests", "data", "flight_recorder")
        self.assertEqual(ptest.run(["export-fr", dumps, "-o", out]).returncode, 0)
        self.assertOneLineError(["export-fr", dumps, "-o", out], ["rank_0", "File exists"])

    def test_duplicate_rank(self):
        a = self.path("dup/a_rank-1.json.gz", open(GOOD, "rb").read())
        b = self.path("dup/b_rank-1.json.gz", open(GOOD, "rb").read())
        line = self.assertOneLineError(["analyze", a, b], ["rank 1"])
        self.assertIn("a_rank-1.json.gz", line)
        self.assertIn("b_rank-1.json.gz", line)

    def test_mixed_world_sizes(self):
        def trace(rank, ws):
            return json.dumps({"distributedInfo": {"rank": rank, "world_size": ws}, "traceEvents": [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}).encode()
        a = self.path("ws/x.json", trace(0, 2))
        b = self.path("ws/y.json", trace(1, 4))
        self.assertOneLineError(["analyze", a, b], ["world size", "x.json", "y.json"])

    def test_unplaced_legacy_trace(self):
        body = json.dumps([
            {"name": "aten::mm", "ph": "X", "ts": 1, "dur": 2, "tid": 1, "pid": "CPU functions", "args": {}}]).encode()
        a = self.path("legacy/trace_a.json", body)
        b = self.path("legacy/trace_b.json", body)
        line = self.assertOneLineError(["analyze", a, b], ["trace_a.json", "trace_b.json", "rank"])
        # A single file is a one-rank job: nothing to place.
        self.assertEqual(ptest.run(["analyze", a]).returncode, 0)

    def test_garbage_summary(self):
        p = self.path("sum/rank-0.summary", b"PTSUMMRY\x01\x00\x00\x00garbage")
        self.assertOneLineError(["diagnose", p], ["rank-0.summary"])

    def test_unknown_events_are_counted_not_fatal(self):
        p = self.path("unknown/rank-0.json", json.dumps({"traceEvents": [
            {"ph": "X", "cat": "some_new_cat", "name": "x", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 3, "dur": 2, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "ts": "bad"}]}).encode())
        r = ptest.run(["analyze", p, "--stats"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 skipped", r.stderr)
        # The skipped malformed event is a note of the report, with where and what.
        self.assertIn('1 malformed event skipped', r.stdout)
        self.assertIn('expected a number for "ts"', r.stdout)

    def test_a_list_of_non_events_is_an_error(self):
        p = self.path("nonevents/rank-0.json", b'[1, 2, "x"]')
        line = self.assertOneLineError(["analyze", p], ["rank-0.json", "no event could be read",
                                                        "byte 1", "expected an event object"])
        self.assertIn("3 malformed events", line)

    def test_string_timestamps_are_an_error(self):
        p = self.path("strts/rank-0.json", json.dumps({"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "a", "ts": "12", "dur": "5", "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "b", "ts": "20", "dur": "5", "pid": 1, "tid": 1}]}).encode())
        self.assertOneLineError(["analyze", p], ["rank-0.json", "no event could be read",
                                                 'expected a number for "ts"'])


if __name__ == "__main__":
    ptest.main()
