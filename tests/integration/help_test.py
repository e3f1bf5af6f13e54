#!/usr/bin/python3
"""`--help` lists every flag of the binary's own, with its help (issue #27).

Abseil's --help lists only the flags of a file named like the program, so attnserve-server's
said "No flags matched" and only --helpfull (among Abseil's own flags) showed them. Here: for
attnserve-server and attnserve-load, every flag --helpfull lists from a file of ours is in
--help too, with its help text, and the server's are grouped by server/flags/*_flags.cc as
README.md's tables are; attnserve-cli's --help names every subcommand, and each subcommand's
--help lists its flags.

Usage: help_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import argparse
import os
import re
import subprocess
import sys
import unittest

ARGS = None


def run(*cmd):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def sections(text):
    """{file: [flag names]} from Abseil's help output ("  Flags from FILE:" headings)."""
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Flags from (\S+):", line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s+--(?:\[no\])?([A-Za-z_][A-Za-z0-9_]*) \(", line)
        if m and current is not None:
            current.append(m.group(1))
    return out


class HelpTest(unittest.TestCase):
    def binary(self, *path):
        return os.path.join(os.path.abspath(ARGS.build_dir), *path)

    def check_lists_its_own_flags(self, binary):
        code, short = run(binary, "--help")
        self.assertEqual(code, 0, short)
        self.assertNotIn("No flags matched", short)
        _, full = run(binary, "--helpfull")
        ours = {f: names for f, names in sections(full).items() if "absl/" not in f}
        self.assertTrue(ours, full)
        listed = sections(short)
        for names in ours.values():
            for name in names:
                self.assertTrue(any(name in n for n in listed.values()),
                                "--%s is missing from %s --help" % (name, binary))
        self.assertFalse(any("absl/" in f for f in listed), "Abseil's flags belong to --helpfull")
        return listed, short

    def test_server_lists_every_flag_grouped(self):
        listed, text = self.check_lists_its_own_flags(self.binary("server", "attnserve-server"))
        groups = {os.path.basename(f) for f in listed}
        for group in ("serving", "security", "limits", "models", "sessions", "scheduler",
                      "session_store", "memory", "prefix_cache"):
            self.assertIn(group + "_flags.cc", groups, text)
        # Each with its help, e.g. the admins' separator.
        self.assertIn("--admin_principals", text)
        self.assertRegex(text, r"separated\s+by\s+';'")
        for path in listed:
            self.assertTrue(path.startswith("server/flags/"), path)
        # Every server flag named in README.md is a flag the server has.
        with open(os.path.join(ARGS.source_dir, "README.md")) as f:
            readme = f.read()
        known = {n for names in listed.values() for n in names}
        for name in ("max_queue_per_client", "adapt_threads_to_load", "idle_memory_trim_s",
                     "max_free_heap_bytes", "kv_buffer_pool_bytes", "max_metadata_bytes",
                     "admin_principals"):
            self.assertIn(name, known)
            self.assertIn("--" + name, readme)

    def test_flags_reference_is_generated_from_help(self):
        # docs/flags.md is scripts/flags_doc.py's rendering of this binary's --help: a flag
        # added, removed or reworded without regenerating it fails here.
        sys.path.insert(0, os.path.join(ARGS.source_dir, "scripts"))
        import flags_doc
        generated = flags_doc.generate(self.binary("server", "attnserve-server"))
        with open(os.path.join(ARGS.source_dir, "docs", "flags.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), generated,
                             "docs/flags.md is stale: run scripts/flags_doc.py --binary "
                             "build/server/attnserve-server")
        for name in ("request_work_threads", "max_text_bytes", "admin_principals"):
            self.assertIn("`--%s`" % name, generated)

    def test_server_refuses_precisions_it_cannot_serve(self):
        server = self.binary("server", "attnserve-server")
        for flags, words in ((["--activation_precision=bf16"], "needs --weight_precision=bf16"),
                             (["--weight_precision=bf16", "--activation_precision=int4"],
                              "expected fp32 or bf16"),
                             (["--weight_precision=int4"], "expected fp32, bf16 or int8")):
            code, out = run(server, "--port=0", "--metrics_port=-1", "--http_port=-1", *flags)
            self.assertNotEqual(code, 0, out)
            self.assertIn(words, out)

    def test_load_lists_its_flags(self):
        self.check_lists_its_own_flags(self.binary("client", "attnserve-load"))

    def test_cli_lists_subcommands_and_their_flags(self):
        cli = self.binary("client", "attnserve-cli")
        code, text = run(cli, "--help")
        self.assertEqual(code, 0, text)
        for sub in ("models", "infer", "stream", "generate", "sessions", "health"):
            self.assertIn(sub, text)
        code, text = run(cli, "generate", "--help")
        self.assertEqual(code, 0, text)
        for flag in ("--max_new_tokens", "--session", "--keep_session", "--close_session"):
            self.assertIn(flag, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
