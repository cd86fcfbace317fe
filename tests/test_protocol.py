"""The worker <-> agent protocol is defined once, in python/perftracker/protocol.py, and the C++
agent agrees with it both ways: the message types and fields src/agent/worker_message.cc parses,
the commands src/agent/socket_sink.cc sends, and the window defaults of
src/base/window_defaults.h (python/perftracker/config.py). The Python side is held to the same
list by running it: the messages its client builds, the commands it dispatches, the stacks it
sends. Each comparison is also run on altered C++ text, to show that a type or field on one side
only fails it."""
import glob
import json
import os
import re
import sys
import tempfile
import threading
import time
import types
import unittest
import unittest.mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
from perftracker import client, config, identity, news, patches, protocol  # noqa: E402
from perftracker.protocol import MessageType  # noqa: E402


def read(rel):
    with open(os.path.join(ptest.SOURCE, rel)) as f:
        return f.read()


def agent_sources():
    """The agent's C++ sources (tests aside): {path: text}."""
    out = {}
    for p in sorted(glob.glob(os.path.join(ptest.SOURCE, "src", "agent", "*.cc"))):
        if not p.endswith("_test.cc"):
            with open(p) as f:
                out[os.path.relpath(p, ptest.SOURCE)] = f.read()
    return out


# ---- reading the C++ side ----

def block_after(text, start):
    """The text between the first '{' at or after START and its matching '}' (string and char
    literals skipped)."""
    i = text.index("{", start)
    depth = 0
    j = i
    while j < len(text):
        c = text[j]
        if c in "\"'":
            j += 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
        j += 1
    raise ValueError("unbalanced braces")


def function_body(text, name):
    m = re.search(r"\b(?:void|bool)\s+" + name + r"\(", text)
    if m is None:
        raise AssertionError(f"no function {name} in the C++ source")
    return block_after(text, m.end())


def fields_of(text, var):
    """Fields read from the JSON object VAR: Get*(VAR, "f") and VAR["f"]."""
    v = re.escape(var)
    return set(re.findall(r"Get\w+\(" + v + r',\s*"(\w+)"\)', text)) | \
        set(re.findall(r"\b" + v + r'\["(\w+)"\]', text))


def parsed_messages(cc):
    """What the agent parses (worker_message.cc): [(type names of one branch, fields it reads)],
    the identity fields, the trigger kinds, and the stacks' inner objects' fields."""
    body = function_body(cc, "ParseWorkerMessage")
    heads = list(re.finditer(r'if \((type == "\w+"(?:\s*\|\|\s*type == "\w+")*)\)\s*\{', body))
    if not heads:
        raise AssertionError("no `type == \"...\"` branches in ParseWorkerMessage")
    branches = []
    for k, h in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else body.index("} else {", h.end())
        text = body[h.end():end]
        fields = fields_of(text, "doc")
        for helper in re.findall(r"\b(Parse\w+)\(doc,", text):
            fields |= fields_of(function_body(cc, helper), "doc")
        branches.append((tuple(re.findall(r'type == "(\w+)"', h.group(1))), fields))
    trigger = next(body[h.end():] for h in heads if '"trigger"' in h.group(1))
    stacks = function_body(cc, "ParseStacks")
    return {
        "branches": branches,
        "identity": fields_of(function_body(cc, "ParseIdentity"), "doc"),
        "trigger_kinds": set(re.findall(r'm\.kind == "(\w+)"', trigger.split("} else if")[0])),
        "thread": fields_of(stacks, "t"),
        "frame": fields_of(stacks, "f"),
        "last_collective": fields_of(stacks, "lc"),
    }


def enum_types(header):
    """WorkerMessageType's enumerators, kMalformed and kUnknown aside."""
    m = re.search(r"enum class WorkerMessageType\s*\{(.*?)\};", header, re.S)
    if m is None:
        raise AssertionError("no enum class WorkerMessageType")
    names = re.findall(r"\b(k\w+)", re.sub(r"//[^\n]*", "", m.group(1)))
    return set(names) - {"kMalformed", "kUnknown"}


def sent_commands(sources):
    """{type: fields} of the lines the agent writes to workers: JsonWriter objects with a "type"
    key, and fmt raw strings {{"type":"x",...}}."""
    out = {}
    for text in sources.values():
        for m in re.finditer(r'\w+\.Key\("type"\)\.String\("(\w+)"\)', text):
            end = text.index("EndObject()", m.end())
            out.setdefault(m.group(1), set()).update(re.findall(r'\.Key\("(\w+)"\)', text[m.end():end]))
        for m in re.finditer(r'\{\{"type":"(\w+)"(.*?)\}\}', text):
            out.setdefault(m.group(1), set()).update(re.findall(r'"(\w+)":', m.group(2)))
    return out


def stats_keys(module_cc):
    """The keys of the dict _worker.stats() returns (src/worker/py/module.cc's Py_BuildValue
    with a dict format)."""
    for m in re.finditer(r"Py_BuildValue\(\s*\"\{", module_cc):
        call = module_cc[m.end():module_cc.index(");", m.end())]
        keys = set(re.findall(r'"([a-z_]+)"', call))
        if "iterations" in keys:
            return keys
    raise AssertionError("no stats() dict in module.cc")


def window_defaults(header):
    it = re.search(r"kIterations\s*=\s*(\d+)\s*;", header)
    s = re.search(r"kMaxSeconds\s*=\s*([\d.]+)\s*;", header)
    if it is None or s is None:
        raise AssertionError("kIterations / kMaxSeconds not found")
    return int(it.group(1)), float(s.group(1))


# ---- the comparisons: each returns a list of disagreements ----

def used(t):
    return set(t.fields) - set(t.agent_skips)


def compare_parsed(parsed, messages=protocol.WORKER_TO_AGENT):
    problems = []
    declared = {t.name: t for t in messages if t.agent_uses}
    cpp = {name for names, _ in parsed["branches"] for name in names}
    for name in sorted(cpp - set(declared)):
        problems.append(f"the agent parses type {name!r}, protocol.py does not declare it")
    for name in sorted(set(declared) - cpp):
        problems.append(f"protocol.py declares type {name!r}, the agent does not parse it")
    for names, reads in parsed["branches"]:
        want = set().union(*(used(declared[n]) for n in names if n in declared))
        if reads != want:
            problems.append(f"{'/'.join(names)}: the agent reads {sorted(reads)}, protocol.py "
                            f"declares {sorted(want)}")
    pairs = (("identity", set(protocol.IDENTITY)),
             ("trigger_kinds", set(protocol.TRIGGER_KINDS)),
             ("thread", set(protocol.STACK_THREAD_FIELDS) - set(protocol.STACK_THREAD_AGENT_SKIPS)),
             ("frame", set(protocol.STACK_FRAME_FIELDS)),
             ("last_collective", set(protocol.LAST_COLLECTIVE_FIELDS)))
    for key, want in pairs:
        if parsed[key] != want:
            problems.append(f"{key}: the agent reads {sorted(parsed[key])}, protocol.py says {sorted(want)}")
    return problems


def compare_enum(enum, messages=protocol.WORKER_TO_AGENT):
    want = {"k" + "".join(p.capitalize() for p in t.name.split("_")) for t in messages if t.agent_uses}
    return [] if enum == want else [f"WorkerMessageType {sorted(enum)} != protocol.py {sorted(want)}"]


def compare_sent(sent, commands=protocol.AGENT_TO_WORKER):
    problems = []
    declared = {t.name: t for t in commands if t.agent_uses}
    for name in sorted(set(sent) - set(declared)):
        problems.append(f"the agent sends {name!r}, protocol.py does not declare it")
    for name in sorted(set(declared) - set(sent)):
        problems.append(f"protocol.py declares command {name!r}, the agent never sends it")
    for name in sorted(set(sent) & set(declared)):
        if sent[name] != used(declared[name]):
            problems.append(f"{name}: the agent sends {sorted(sent[name])}, protocol.py declares "
                            f"{sorted(used(declared[name]))}")
    return problems


def compare_defaults(header):
    iters, max_s = window_defaults(header)
    if (iters, max_s) != (config.WINDOW_ITERATIONS, config.WINDOW_MAX_S):
        return [f"window_defaults.h ({iters}, {max_s}) != config.py "
                f"({config.WINDOW_ITERATIONS}, {config.WINDOW_MAX_S})"]
    most_it = re.search(r"kMostIterations\s*=\s*(\d+)\s*;", header)
    most_s = re.search(r"kMostSeconds\s*=\s*([\d.]+)\s*;", header)
    if most_it is None or most_s is None:
        return ["kMostIterations / kMostSeconds not found in window_defaults.h"]
    if (int(most_it.group(1)), float(most_s.group(1))) != (config.WINDOW_MOST_ITERATIONS,
                                                           config.WINDOW_MOST_S):
        return [f"window_defaults.h bounds ({most_it.group(1)}, {most_s.group(1)}) != config.py "
                f"({config.WINDOW_MOST_ITERATIONS}, {config.WINDOW_MOST_S})"]
    return []


def parser_source():
    for path, text in agent_sources().items():
        if re.search(r"\bvoid ParseWorkerMessage\(", text):
            return text
    raise AssertionError("ParseWorkerMessage's definition not found in src/agent")


class CppAgrees(unittest.TestCase):
    def test_the_types_and_fields_the_agent_parses(self):
        self.assertEqual(compare_parsed(parsed_messages(parser_source())), [])

    def test_the_agents_message_enum(self):
        self.assertEqual(compare_enum(enum_types(read("src/agent/worker_message.h"))), [])

    def test_the_commands_the_agent_sends(self):
        sent = sent_commands(agent_sources())
        self.assertIn("profile", sent)
        self.assertEqual(compare_sent(sent), [])

    def test_stats_fields_are_in_worker_stats(self):
        keys = stats_keys(read("src/worker/py/module.cc"))
        self.assertLessEqual(set(protocol.STATS.fields), keys)

    def test_window_defaults(self):
        self.assertEqual(compare_defaults(read("src/base/window_defaults.h")), [])

    def test_protocol_md_names_every_type(self):
        md = read("src/worker/protocol.md")
        for t in protocol.WORKER_TO_AGENT + protocol.AGENT_TO_WORKER:
            self.assertIn(f"| `{t.name}` |", md)


class OneSidedFails(unittest.TestCase):
    """The comparisons on altered sources: what they must catch."""

    def setUp(self):
        self.cc = parser_source()

    def test_a_type_only_the_agent_parses(self):
        cc = self.cc.replace('} else if (type == "relearn") {',
                             '} else if (type == "extra") {\n    m.type = T::kRelearn;\n'
                             '  } else if (type == "relearn") {')
        self.assertNotEqual(cc, self.cc)
        self.assertTrue(any("'extra'" in p for p in compare_parsed(parsed_messages(cc))))

    def test_a_type_only_protocol_py_declares(self):
        more = protocol.WORKER_TO_AGENT + (MessageType("extra"),)
        self.assertTrue(compare_parsed(parsed_messages(self.cc), more))
        self.assertTrue(compare_enum(enum_types(read("src/agent/worker_message.h")), more))

    def test_a_field_on_one_side(self):
        cc = self.cc.replace('GetInt(doc, "v")', 'GetInt(doc, "version")')
        self.assertNotEqual(cc, self.cc)
        self.assertTrue(compare_parsed(parsed_messages(cc)))
        cc = self.cc.replace('GetString(doc, "pattern")', 'GetString(doc, "sequence")')
        self.assertTrue(compare_parsed(parsed_messages(cc)))
        cc = self.cc.replace('GetInt(t, "tid")', 'GetInt(t, "thread_id")')
        self.assertTrue(compare_parsed(parsed_messages(cc)))

    def test_a_command_or_field_on_one_side(self):
        src = agent_sources()
        sent = sent_commands(src)
        self.assertEqual(compare_sent(sent), [])
        dropped = {k: v for k, v in sent.items() if k != "uploaded"}
        self.assertTrue(compare_sent(dropped))
        renamed = sent_commands({k: v.replace('Key("dir")', 'Key("folder")') for k, v in src.items()})
        self.assertTrue(compare_sent(renamed))
        more = protocol.AGENT_TO_WORKER + (MessageType("pause"),)
        self.assertTrue(compare_sent(sent, more))

    def test_window_defaults_that_differ(self):
        h = read("src/base/window_defaults.h")
        self.assertTrue(compare_defaults(h.replace("kIterations = 10;", "kIterations = 11;")))
        self.assertTrue(compare_defaults(h.replace("kMaxSeconds = 20;", "kMaxSeconds = 30;")))
        self.assertTrue(compare_defaults(h.replace("kMostIterations = 1000;", "kMostIterations = 9;")))
        self.assertTrue(compare_defaults(h.replace("kMostSeconds = 600;", "kMostSeconds = 60;")))


class FakeWorker:
    """perftracker._worker's surface the client uses, with news of every kind."""

    def __init__(self, path):
        self.path = path
        self.started = []

    def drain(self):
        return [("iter", 3, 100, 200, 1), ("learned", "DO"), ("relearn",), ("slowdown", 4, 10, 5),
                ("hang", 5, 99, 10), ("window_done", self.path), ("window_failed", self.path + "x")]

    def start_window(self, iters, max_s, out, start_iter):
        self.started.append((iters, max_s, out, start_iter))
        return True

    def hold_detector(self, on):
        pass

    def stop_window(self):
        pass


def fake_collector(worker=None):
    """The collector's parts wired as hooks.RankMonitor wires them, around WORKER (a fake _worker);
    an internal error raises instead of turning the collector off."""
    switch = types.SimpleNamespace(w=worker, off=False)
    switch.turn_off = lambda e: (_ for _ in ()).throw(e)
    from perftracker.window import WindowState
    c = types.SimpleNamespace(switch=switch, train_tid=None, client=None)
    c.windows = WindowState(switch, lambda m: c.client.send(m) if c.client is not None else None)
    c.patches = patches.TorchPatches(switch, lambda: None, lambda: None)
    return c


def agent_client(c, log=""):
    """An agent client of C's parts (fake_collector), without a socket."""
    return client.AgentClient(c.switch, c.windows, c.patches.ring, "", log,
                              train_tid=lambda: c.train_tid, last_collective=c.patches.last_collective)


class PythonSideAgrees(unittest.TestCase):
    def check_message(self, m, directions=protocol.WORKER_TO_AGENT):
        kinds = {t.name: t for t in directions}
        self.assertIn(m["type"], kinds, m)
        t = kinds[m["type"]]
        if not t.open:
            self.assertLessEqual(set(m) - {"type"} - set(protocol.IDENTITY), set(t.fields), m)

    def test_the_client_builds_declared_messages(self):
        log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        w = FakeWorker("/tmp/w.python.json")
        c = fake_collector(w)
        ac = agent_client(c, log)
        c.client = ac
        ac._command(json.dumps({"type": "profile", "path": w.path, "window": 7}).encode())
        ac.tick()
        with open(log) as f:
            msgs = [json.loads(x) for x in f]
        self.assertEqual(w.started, [(config.WINDOW_ITERATIONS, config.WINDOW_MAX_S, w.path, -1)])
        seen = {m["type"] for m in msgs}
        self.assertEqual(seen, {"iterations", "learned", "relearn", "trigger", "python_trace", "profile_ack"})
        for m in msgs:
            self.check_message(m)
            self.assertLessEqual(set(protocol.IDENTITY), set(m))
        self.check_message(ac.stacks_reply(1))

    def test_a_message_from_another_thread_goes_at_once_not_at_the_next_period(self):
        # A window's torch trace is queued by the export thread: the agent summarizes the
        # window once every rank's traces are in, so it must not wait for the period's tick.
        log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        c = fake_collector(FakeWorker("/tmp/w.python.json"))
        ac = client.AgentClient(c.switch, c.windows, c.patches.ring, "", log, 60.0,
                                train_tid=lambda: None, last_collective=lambda: None)
        ac.start()
        self.addCleanup(lambda: (ac.stop.set(), ac.wake.set()))

        def sent():
            with open(log) as f:
                return [json.loads(x) for x in f if '"torch_trace"' in x]
        ac.send(protocol.make(protocol.TORCH_TRACE, path="/tmp/w.torch.json", window=3))
        deadline = time.monotonic() + 5
        while not sent() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual([m["window"] for m in sent()], [3])  # the period is a minute

    def test_iterations_carry_the_cuda_allocators_figures_once_cuda_is_up(self):
        def nested(allocated, reserved, peak):  # torch.cuda.memory_stats_as_nested_dict's shape
            return {"allocated_bytes": {"all": {"current": allocated, "peak": peak}},
                    "reserved_bytes": {"all": {"current": reserved, "peak": reserved}}}
        stats = {0: nested(100, 400, 300), 1: nested(5, 6, 7)}
        cuda = types.SimpleNamespace(up=False, calls=0)

        def memory_stats(d):
            cuda.calls += 1
            if cuda.calls > 4:
                raise RuntimeError("a torch whose allocator cannot say")
            return stats[d]
        cuda.is_initialized = lambda: cuda.up
        cuda.device_count = lambda: 2
        cuda.memory_stats_as_nested_dict = memory_stats
        fake_torch = types.SimpleNamespace(cuda=cuda)

        def iterations_sent():
            log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
            c = fake_collector(FakeWorker("/tmp/w.python.json"))
            ac = agent_client(c, log)
            with unittest.mock.patch.dict(sys.modules, {"torch": fake_torch}):
                ac.tick()
            with open(log) as f:
                msgs = [json.loads(x) for x in f]
            its = [m for m in msgs if m["type"] == "iterations"]
            self.assertEqual(len(its), 1, msgs)
            self.check_message(its[0])
            return its[0]
        # Before the job's code initialized CUDA: none, and the allocator is not asked.
        self.assertNotIn("cuda", iterations_sent())
        self.assertEqual(cuda.calls, 0)
        # Then the sums over the devices: allocated, reserved, peak allocated.
        cuda.up = True
        self.assertEqual(iterations_sent()["cuda"], [105, 406, 307])
        self.assertEqual(iterations_sent()["cuda"], [105, 406, 307])
        # A torch whose figures cannot be read: none, and it is not asked again.
        reader = client.CudaMemory()
        with unittest.mock.patch.dict(sys.modules, {"torch": fake_torch}):
            self.assertIsNone(reader.read())
            calls = cuda.calls
            self.assertIsNone(reader.read())
        self.assertEqual(cuda.calls, calls)

    def test_the_client_handles_every_command(self):
        ac = agent_client(fake_collector())
        self.assertEqual(set(ac.handlers), {t.name for t in protocol.AGENT_TO_WORKER})

    def test_the_client_reads_declared_command_fields_only(self):
        with open(client.__file__) as f:
            reads = set(re.findall(r'cmd\.get\("(\w+)"', f.read()))
        declared = set().union(*(set(t.fields) for t in protocol.AGENT_TO_WORKER))
        self.assertEqual(reads - {"type"}, declared)

    def test_no_message_is_spelled_outside_protocol_py(self):
        for p in glob.glob(os.path.join(os.path.dirname(protocol.__file__), "*.py")):
            if os.path.basename(p) == "protocol.py":
                continue
            with open(p) as f:
                self.assertIsNone(re.search(r"""["']type["']\s*:""", f.read()), p)

    def test_make_refuses_an_undeclared_field(self):
        self.assertEqual(protocol.make(protocol.UPLOADED, window=3), {"type": "uploaded", "window": 3})
        with self.assertRaises(ValueError):
            protocol.make(protocol.TORCH_TRACE, torch=True)
        self.assertEqual(protocol.make(protocol.STATS, anything=1)["anything"], 1)  # open

    def test_stacks_threads_frames_and_last_collective(self):
        out = {}

        def deep(n):
            if n:
                return deep(n - 1)
            out["threads"] = client.thread_stacks(None)

        t = threading.Thread(target=deep, args=(config.MAX_STACK_FRAMES + 20,))
        t.start()
        t.join()
        mine = [x for x in out["threads"] if x["tid"] == t.native_id]
        self.assertEqual(len(mine), 1)
        self.assertEqual(set(mine[0]), set(protocol.STACK_THREAD_FIELDS))  # frames_dropped too
        for th in out["threads"]:
            self.assertLessEqual(set(th), set(protocol.STACK_THREAD_FIELDS))
            for fr in th["frames"]:
                self.assertEqual(set(fr), set(protocol.STACK_FRAME_FIELDS))
        p = fake_collector().patches
        wrapped = p._wrap_collective("all_reduce", lambda: 1, "/nonexistent/torch/")
        self.assertEqual(wrapped(), 1)
        self.assertEqual(set(p.last_collective()), set(protocol.LAST_COLLECTIVE_FIELDS))


# ---- the _worker module's bindings, its news and the limits Python shares with C++ ----

def binding_names(module_cc):
    """The names kMethods of module.cc binds."""
    table = module_cc[module_cc.index("PyMethodDef kMethods[]"):]
    table = table[:table.index("{nullptr, nullptr, 0, nullptr}")]
    return set(re.findall(r'\{"(\w+)",', table))


def stub_names(pyi):
    return set(re.findall(r"^def (\w+)\(", pyi, re.M))


def compare_bindings(module_cc, pyi):
    bound, typed = binding_names(module_cc), stub_names(pyi)
    return ([f"{n}: bound in module.cc, not in _worker.pyi" for n in sorted(bound - typed)] +
            [f"{n}: in _worker.pyi, not bound in module.cc" for n in sorted(typed - bound)])


def drain_tuples(module_cc):
    """{kind: number of fields after it} from the tuples Drain builds."""
    body = block_after(module_cc, module_cc.index("PyObject* Drain("))
    return {kind: len(fmt) - 1
            for fmt, kind in re.findall(r'Py_BuildValue\("\((\w+)\)",\s*"(\w+)"', body)}


def compare_news(tuples):
    expected = {kind: len(t._fields) for kind, t in news.KINDS.items()}
    expected.update({"window_done": 1, "window_failed": 1})
    return [f"{k}: drain() gives {tuples.get(k)} fields, perftracker.news reads {expected.get(k)}"
            for k in sorted(set(tuples) | set(expected)) if tuples.get(k) != expected.get(k)]


def limit_values(header):
    """{name: value} of limits.h's integer constants (values like `1 << 20`, `16u << 20`)."""
    out = {}
    for name, expr in re.findall(r"inline constexpr \w+ (k\w+) = ([^;]+);", header):
        expr = re.sub(r"(\d+)u\b", r"\1", expr)
        if re.fullmatch(r"[\d\s<+*()]+", expr):
            out[name] = eval(expr)  # digits and operators only, checked above
    return out


def compare_limits(values):
    """Python's copies of C++ limits: equal where both sides bound the same thing, no larger
    where Python sends what the agent bounds."""
    out = []
    for py, cc in ((identity.MAX_WORLD_SIZE, "kMaxWorldSize"), (identity.MAX_ATTEMPT, "kMaxAttempt")):
        if values.get(cc) != py:
            out.append(f"{cc} is {values.get(cc)} in limits.h, {py} in identity.py")
    for py, cc in ((config.MAX_STACK_THREADS, "kMaxStackThreads"),
                   (config.MAX_STACK_FRAMES, "kMaxStackFrames")):
        if cc not in values or py > values[cc]:
            out.append(f"config.py sends up to {py} where the agent keeps {values.get(cc)} ({cc})")
    return out


class WorkerBindings(unittest.TestCase):
    def test_the_stub_types_every_binding(self):
        cc, pyi = read("src/worker/py/module.cc"), read("python/perftracker/_worker.pyi")
        self.assertGreaterEqual(len(binding_names(cc)), 15)
        self.assertEqual(compare_bindings(cc, pyi), [])
        self.assertTrue(compare_bindings(cc, pyi.replace("def drain(", "def drained(")))

    def test_news_reads_the_tuples_drain_builds(self):
        cc = read("src/worker/py/module.cc")
        tuples = drain_tuples(cc)
        self.assertIn("iter", tuples)
        self.assertEqual(compare_news(tuples), [])
        self.assertTrue(compare_news(drain_tuples(cc.replace('"(sLLL)", "hang"', '"(sLL)", "hang"'))))
        self.assertEqual(news.parse(("iter", 7, 100, 250, True)), news.Iteration(7, 100, 250, True))
        self.assertEqual(news.parse(("window_failed", "/w")), news.WindowEnd(False, "/w"))
        self.assertIsNone(news.parse(("hang", 1, 2)))  # a layout this version does not read
        self.assertIsNone(news.parse(("later_kind", 1)))

    def test_limits_python_shares_with_cpp(self):
        values = limit_values(read("src/base/limits.h"))
        self.assertEqual(compare_limits(values), [])
        values["kMaxStackFrames"] = config.MAX_STACK_FRAMES - 1
        self.assertTrue(compare_limits(values))


if __name__ == "__main__":
    ptest.main()
