#!/usr/bin/python3
"""The top-level Dockerfile and .dockerignore.

  * The build stage builds the way README.md's quick start does: the same scripts, in the
    same order, as scripts/run.sh runs them (scripts/setup.sh --build-only, scripts/build.sh),
    with only the environment variables and CMake options README.md documents, and no package
    installs or CMake runs of its own.
  * The runtime stage installs every shared library that the binaries it copies link
    (objdump's NEEDED entries of the built binaries, mapped to Debian packages with dpkg), and
    no -dev package or toolchain; the binaries it copies are targets the build makes.
  * Ports, user, model repository and entrypoint agree with deploy/k8s; every FROM resolves
    (with the ARG defaults) to a tagged image.
  * dockerfilelint and dockerfile-utils (npm, offline) find no problem, and both find the
    problems of a known-bad Dockerfile.
  * .dockerignore keeps the build folders and .git out of the context and every source file
    the build needs in.

Usage: dockerfile_test.py --build-dir BUILD --source-dir SOURCE --node-modules DIR (CTest).
"""
import json
import os
import re
import shlex
import subprocess
import tempfile
import unittest

import deploy_common as dc

ARGS = dc.parse_args()
ARGS.source_dir = os.path.abspath(ARGS.source_dir)
ARGS.build_dir = os.path.abspath(ARGS.build_dir)
DOCKERFILE = os.path.join(ARGS.source_dir, "Dockerfile")
TOOLCHAIN = {"g++", "gcc", "cmake", "ninja-build", "make", "ccache", "protobuf-compiler",
             "protobuf-compiler-grpc", "pkg-config"}


def instructions(path):
    """[(INSTRUCTION, arguments, line)] with continuations joined and comments dropped."""
    out, pending, start = [], "", 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if pending and stripped.startswith("#"):
                continue  # a comment line inside a continued instruction
            if not pending:
                start = number
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            text = pending + stripped
            pending = ""
            keyword, _, rest = text.partition(" ")
            out.append((keyword.upper(), rest.strip(), start))
    return out


def stages(path):
    """[[instructions of stage 0], ...]; the ARGs before the first FROM form stage -1."""
    result, current = [], []
    for instruction in instructions(path):
        if instruction[0] == "FROM":
            result.append(current)
            current = []
        current.append(instruction)
    result.append(current)
    return result[0], result[1:]


def shell_commands(run):
    """The simple commands of a RUN line, split at && and ;."""
    return [shlex.split(c) for c in re.split(r"&&|;", run) if c.strip()]


def script_calls(commands):
    """[(env assignments, script, arguments)] of the commands that run scripts/*.sh."""
    calls = []
    for words in commands:
        env = {}
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words and words[0].startswith("scripts/"):
            calls.append((env, words[0], [w for w in words[1:] if w not in (">&2",)]))
    return calls


def dpkg_packages():
    """{package: (priority, [dependencies])} of the installed packages."""
    out = subprocess.run(["dpkg-query", "-W", "-f",
                          "${Package}\t${Priority}\t${Pre-Depends}, ${Depends}\n"],
                         capture_output=True, text=True, check=True).stdout
    packages = {}
    for line in out.splitlines():
        name, priority, depends = line.split("\t")
        names = [re.split(r"[\s(:]", alt.strip())[0] for dep in depends.split(",")
                 for alt in dep.split("|") if alt.strip()]
        packages[name] = (priority, names)
    return packages


def closure(roots, packages):
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += packages.get(name, ("", []))[1]
    return seen


def needed_packages(binary):
    """{library: package} for the NEEDED entries of `binary`, resolved as ldd does and
    mapped to packages with one dpkg -S call."""
    needed = re.findall(r"NEEDED\s+(\S+)", subprocess.run(
        ["objdump", "-p", binary], capture_output=True, text=True, check=True).stdout)
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", subprocess.run(
        ["ldd", binary], capture_output=True, text=True, check=True).stdout, re.MULTILINE))
    paths = {}
    for library in needed:
        if library not in resolved and not library.startswith("ld-linux"):
            raise AssertionError(f"{binary}: ldd cannot find {library}")
        path = os.path.realpath(resolved.get(library, "/lib64/" + library))
        # Debian 12 has merged /usr: dpkg knows a file by the path its package ships.
        paths[library] = [path, re.sub(r"^/usr/lib", "/lib", path), re.sub(r"^/lib", "/usr/lib", path),
                          re.sub(r"^/usr/lib", "/lib", os.path.dirname(path)) + "/" + library,
                          os.path.dirname(path) + "/" + library]
    out = subprocess.run(["dpkg", "-S", *sorted({p for ps in paths.values() for p in ps})],
                         capture_output=True, text=True).stdout
    owner = {}
    for line in out.splitlines():
        package, _, path = line.partition(": ")
        owner[path.strip()] = package.split(":")[0].split(",")[0].strip()
    result = {}
    for library, candidates in paths.items():
        found = [owner[p] for p in candidates if p in owner]
        if not found:
            raise AssertionError(f"no Debian package holds {library} ({candidates[0]})")
        result[library] = found[0]
    return result


def node_modules_bin(name):
    return os.path.join(ARGS.node_modules, ".bin", name)


def dockerfilelint(path):
    out = subprocess.run([node_modules_bin("dockerfilelint"), "-c", dc.HERE, "-o", "json", path],
                         capture_output=True, text=True, timeout=60)
    return [f"line {i['line']}: {i['title']}" for f in json.loads(out.stdout)["files"]
            for i in f["issues"]]


def dockerfile_utils(path):
    script = ("import fs from 'fs'; import { validate } from 'dockerfile-utils';"
              "console.log(JSON.stringify(validate(fs.readFileSync(process.argv[1], 'utf8'))));")
    out = subprocess.run(["node", "--input-type=module", "-e", script, os.path.abspath(path)], capture_output=True,
                         text=True, timeout=60, cwd=os.path.dirname(ARGS.node_modules), check=True)
    return [f"line {d['range']['start']['line'] + 1}: {d['message']}" for d in json.loads(out.stdout)]


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.global_args, cls.stages = stages(DOCKERFILE)
        cls.build_stage, cls.runtime = cls.stages[0], cls.stages[-1]
        with open(os.path.join(ARGS.source_dir, "README.md")) as f:
            cls.readme = f.read()

    def arg_defaults(self, stage=()):
        defaults = {}
        for keyword, rest, _ in list(self.global_args) + list(stage):
            if keyword == "ARG":
                name, _, value = rest.partition("=")
                defaults[name] = shlex.split(value)[0] if value else ""
        return defaults

    def test_two_stages_from_tagged_debian_bookworm(self):
        self.assertEqual(len(self.stages), 2)
        defaults = self.arg_defaults()
        for stage in self.stages:
            image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], stage[0][1].split()[0])
            self.assertEqual(image, "debian:bookworm")
        self.assertRegex(self.build_stage[0][1], r"\bAS build$")

    def test_build_stage_runs_the_readme_build(self):
        # README: scripts/run.sh installs what the build needs and builds; run.sh's own
        # commands are the sequence to repeat.
        self.assertIn("scripts/run.sh", self.readme)
        self.assertIn("scripts/setup.sh", self.readme)
        with open(os.path.join(ARGS.source_dir, "scripts/run.sh")) as f:
            run_sh = [line for line in f.read().splitlines()
                      if line.strip() and not line.lstrip().startswith("#")]
        readme_calls = [(script, args) for _, script, args in script_calls(
            [shlex.split(line.replace(">&2", "")) for line in run_sh])]
        self.assertEqual([s for s, _ in readme_calls], ["scripts/setup.sh", "scripts/build.sh"])

        runs = [rest for keyword, rest, _ in self.build_stage if keyword == "RUN"]
        commands = [c for run in runs for c in shell_commands(run)]
        docker_calls = script_calls(commands)
        self.assertEqual([(s, a) for _, s, a in docker_calls][:1], readme_calls[:1],
                         "setup.sh exactly as scripts/run.sh calls it")
        self.assertEqual([s for _, s, _ in docker_calls], [s for s, _ in readme_calls])
        env, _, build_args = docker_calls[1]
        # Only what README.md documents: BUILD_DIR and JOBS, and the options of its table.
        self.assertTrue(set(env) <= {"BUILD_DIR", "JOBS"}, env)
        for key in env:
            self.assertIn(f"`{key}`", self.readme)
        defaults = self.arg_defaults(self.build_stage)
        expanded = []
        for arg in build_args:
            expanded += shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], arg))
        for arg in expanded:
            option = re.match(r"^-D(\w+)=", arg)
            self.assertTrue(option, f"build.sh argument {arg} is not -DOPTION=VALUE")
            self.assertRegex(self.readme, rf"\|\s*`{option.group(1)}`\s*\|",
                             f"{option.group(1)} is not in README.md's build options")
        # Nothing else installs packages or runs CMake in the build stage.
        for words in commands:
            self.assertNotIn(words[0], ("apt-get", "apt", "cmake", "ninja", "make"), words)

    def test_runtime_stage_has_every_library_the_binaries_link(self):
        runs = " && ".join(rest for keyword, rest, _ in self.runtime if keyword == "RUN")
        listed = set()
        for words in shell_commands(runs):
            if words[:2] == ["apt-get", "install"]:
                listed |= {w for w in words[2:] if not w.startswith("-")}
        self.assertTrue(listed)
        for package in listed:
            self.assertFalse(package.endswith("-dev"), package)
            self.assertNotIn(package, TOOLCHAIN)
        packages = dpkg_packages()
        in_base = closure([p for p, (priority, _) in packages.items() if priority == "required"]
                          + ["apt"], packages)
        provided = closure(listed, packages) | in_base
        checked = 0
        for source, _ in self.copied_binaries():
            binary = os.path.join(ARGS.build_dir, os.path.relpath(source, "/build"))
            if not os.path.exists(binary):
                print(f"note: {binary} is not built here; its libraries are not checked")
                continue
            for library, package in needed_packages(binary).items():
                self.assertTrue(package in provided, f"{binary} links {library} from "
                                                     f"{package}, which the runtime stage does "
                                                     f"not install")
            checked += 1
        self.assertIn("attnserve-server", " ".join(s for s, _ in self.copied_binaries()))
        self.assertGreater(checked, 0, "no binary to check: build the server first")

    def copied_binaries(self):
        """[(path in the build stage, destination)] of COPY --from=build ... /usr/local/bin/."""
        out = []
        for keyword, rest, _ in self.runtime:
            words = rest.split()
            if keyword == "COPY" and words[0] == "--from=build" and words[-1] == "/usr/local/bin/":
                out += [(w, "/usr/local/bin/" + os.path.basename(w)) for w in words[1:-1]]
        return out

    def test_copied_binaries_are_build_targets(self):
        build_dir = re.search(r"BUILD_DIR=(\S+)", " ".join(
            r for k, r, _ in self.build_stage if k == "RUN")).group(1)
        for source, _ in self.copied_binaries():
            self.assertTrue(source.startswith(build_dir + "/"), source)
            folder, name = os.path.split(os.path.relpath(source, build_dir))
            with open(os.path.join(ARGS.source_dir, folder, "CMakeLists.txt")) as f:
                self.assertRegex(f.read(), rf"add_executable\({re.escape(name)}\s",
                                 f"{folder}/CMakeLists.txt makes no {name}")

    def test_runtime_agrees_with_the_deployment(self):
        resources = dc.render(dc.overlays(ARGS.source_dir)["cpu"])
        deployment, container = dc.server_container(resources)
        ports = {p["containerPort"] for p in container["ports"]}
        exposed = {int(p) for k, r, _ in self.runtime if k == "EXPOSE" for p in r.split()}
        self.assertEqual(exposed, ports)
        user = [r for k, r, _ in self.runtime if k == "USER"][-1]
        uid = user.split(":")[0]
        self.assertTrue(uid.isdigit() and int(uid) > 0, "a numeric non-root USER")
        self.assertEqual(int(uid), deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
        entrypoint = json.loads([r for k, r, _ in self.runtime if k == "ENTRYPOINT"][-1])
        self.assertIn(entrypoint[0], [d for _, d in self.copied_binaries()])
        self.assertTrue(entrypoint[0].endswith("/attnserve-server"))
        # The default model repository: exported in the build stage, copied, and the one
        # both the image's CMD and the ConfigMap's flags name.
        run = " ".join(r for k, r, _ in self.build_stage if k == "RUN")
        exported = re.search(r"attnserve-export-model\s.*--out=(\S+)", run).group(1)
        self.assertIn(("COPY", f"--from=build {exported} {exported}"),
                      [(k, r) for k, r, _ in self.runtime])
        cmd = json.loads([r for k, r, _ in self.runtime if k == "CMD"][-1])
        self.assertIn(f"--model_repository={exported}", cmd)
        self.assertEqual(dc.ServerConfig(resources).value("model_repository"), exported)

    def test_linters(self):
        self.assertEqual(dockerfilelint(DOCKERFILE), [])
        self.assertEqual(dockerfile_utils(DOCKERFILE), [])
        with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile") as bad:
            bad.write('FROM debian\nRUN apt-get install curl\nEXPOSE http\nCMD ["a"\n')
            bad.flush()
            self.assertTrue(dockerfilelint(bad.name), "dockerfilelint found nothing wrong")
            self.assertTrue(dockerfile_utils(bad.name), "dockerfile-utils found nothing wrong")


def ignored(path, patterns):
    """Docker's .dockerignore rule: a path is out when it or a parent folder matches the last
    matching pattern, unless that pattern is an exception (!)."""
    def regex(pattern):
        out = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                out += ".*"
                i += 2
            elif pattern[i] == "*":
                out += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                out += "[^/]"
                i += 1
            else:
                out += re.escape(pattern[i])
                i += 1
        return re.compile(out + "$")
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        compiled = regex(pattern.lstrip("!").strip("/"))
        if any(compiled.match(p) for p in prefixes):
            result = not negate
    return result


class DockerignoreTest(unittest.TestCase):
    def test_context(self):
        with open(os.path.join(ARGS.source_dir, ".dockerignore")) as f:
            patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]
        for path in (".git/config", "build/CMakeCache.txt", "build-asan/x.o",
                     "tests/deploy/__pycache__/x.pyc"):
            self.assertTrue(ignored(path, patterns), path)
        listed = subprocess.run(["git", "ls-files"], cwd=ARGS.source_dir, capture_output=True,
                                text=True)
        files = listed.stdout.split() if listed.returncode == 0 else [
            os.path.relpath(os.path.join(d, f), ARGS.source_dir)
            for d, _, fs in os.walk(ARGS.source_dir) for f in fs]
        needed = [f for f in files if re.match(
            r"^(CMakeLists\.txt|cmake/|proto/|kernels/|server/|client/|scripts/)", f)]
        self.assertGreater(len(needed), 20)
        for path in needed:
            self.assertFalse(ignored(path, patterns), f"{path} is left out of the build context")


if __name__ == "__main__":
    unittest.main()
