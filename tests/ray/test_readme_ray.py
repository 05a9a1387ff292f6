"""The README's "Scale out with Ray" section runs as written: its `serve run` command serves the
model on two replicas that answer its curl command, and its Python block tunes on Ray and checks
its own result, and its `yirage optimize --ray` command reports the cluster's winner. All join the
tests' Ray through RAY_ADDRESS."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from ray_support import free_port, require, yirage_command

# Ray Serve's pydantic models warn when imported: Ray's warnings, not this suite's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def section(source_dir):
    readme = (source_dir / "README.md").read_text()
    return readme.split("## Scale out with Ray\n", 1)[1].split("\n## ", 1)[0]


def ray_env(local_ray, model_path):
    address = local_ray.get_runtime_context().gcs_address
    return dict(os.environ, RAY_ADDRESS=address, YIRAGE_MODEL_PATH=model_path)


# The README's `serve` command as this interpreter runs it (Ray's console script is
# ray.serve.scripts:cli): a `serve` on PATH may belong to another Python, one without yirage, and
# a virtualenv that sees the system's ray has no script of its own.
SERVE = (f"{shlex.quote(sys.executable)} -c "
         "'import sys; from ray.serve.scripts import cli; sys.exit(cli())'")


def test_the_serve_run_command_answers_the_curl_command(local_ray, model_path, source_dir):
    from ray import serve

    block = re.findall(r"```bash\n(.*?)```", section(source_dir), flags=re.S)[0]
    commands = block.replace("\\\n", "").strip().splitlines()
    assert commands[0].startswith("serve run yirage.ray:app ") and commands[1].startswith("curl ")
    # `serve run` deploys into the Serve instance of the cluster it joins; started here, that one
    # listens on a free port instead of the README's 8000.
    port = str(free_port())
    serve.start(http_options={"host": "127.0.0.1", "port": int(port)})
    env = ray_env(local_ray, model_path)
    command = SERVE + commands[0][len("serve"):]
    run = subprocess.Popen(["bash", "-c", "exec " + command], cwd=source_dir, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            reply = subprocess.run(["bash", "-c", commands[1].replace("8000", port)],
                                   cwd=source_dir, env=env, capture_output=True, text=True,
                                   timeout=120)
            if reply.returncode == 0 and reply.stdout.startswith("{"):
                break
            assert run.poll() is None, run.stdout.read()
            assert time.monotonic() < deadline, reply.stdout + reply.stderr
            time.sleep(1)
        answer = json.loads(reply.stdout)
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
        # The first replica up answers; the README asked for two.
        while True:
            app = serve.status().applications["default"]
            states = app.deployments["YirageServer"].replica_states
            if states == {"RUNNING": 2}:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.5)
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=120)
        serve.shutdown()


def test_the_python_block_tunes_on_ray(local_ray, model_path, source_dir, tmp_path):
    (block,) = re.findall(r"```python\n(.*?)```", section(source_dir), flags=re.S)
    env = ray_env(local_ray, model_path)
    env["YIRAGE_CACHE_DIR"] = str(tmp_path)  # a cache of its own: the tuning is not skipped
    result = subprocess.run([sys.executable, "-c", block], cwd=source_dir, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if "tuned on" in line]
    assert [line.split()[0] for line in lines] == ["examples/ntrans.json", "examples/lora.json"]
    assert (tmp_path / "tuning.sqlite").exists()


def test_the_optimize_ray_command_reports_the_clusters_winner(local_ray, model_path, source_dir,
                                                              tmp_path):
    command = yirage_command()
    require(command is not None, "no yirage command (YIRAGE_BIN, pip's or the build's)",
            "YIRAGE_REQUIRE_RAY")
    (line,) = re.findall(r"```bash\n(.*?)```", section(source_dir), flags=re.S)[1].splitlines()
    assert line.startswith("yirage optimize ") and "--ray" in line
    env = ray_env(local_ray, model_path)
    env["YIRAGE_CACHE_DIR"] = str(tmp_path)
    env["PATH"] = os.path.dirname(command) + os.pathsep + env["PATH"]
    result = subprocess.run(["bash", "-c", line], cwd=source_dir, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ray: tuned on node" in result.stderr
    assert "cached winner" in result.stdout, result.stdout
