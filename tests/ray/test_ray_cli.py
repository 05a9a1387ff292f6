"""`python3 -m yirage.ray_cli tune`, the process `yirage optimize --ray` starts: the tuning options
it is given reach the Ray task's superoptimize config. Ray itself is replaced by a stand-in that
records the call, so this checks the forwarding alone; test_ray_cluster.py runs the real thing."""
import json

from yirage import ray_cli


class FakeYirageRay:
    def __init__(self):
        self.calls = []

    def tune_graphs(self, graphs, backend, config, budget, cache):
        self.calls.append({"graphs": graphs, "backend": backend, "config": config,
                           "budget": budget, "cache": cache})
        return [{"node": "10.0.0.2", "pid": 7, "report": {"cache_hit": False}}]


def run(monkeypatch, tmp_path, *flags):
    fake = FakeYirageRay()
    monkeypatch.setattr(ray_cli, "connect", lambda address, who: (None, fake))
    result = tmp_path / "result.json"
    code = ray_cli.main(["tune", "--address", "127.0.0.1:6379", "--backend", "cpu", "--budget",
                         "2", "--cache", str(tmp_path / "c.sqlite"), "--result", str(result),
                         *flags, "examples/lora.json"])
    return code, fake.calls, json.loads(result.read_text())


def test_top_k_and_profile_all_reach_the_tasks_config(monkeypatch, tmp_path):
    code, calls, outcome = run(monkeypatch, tmp_path, "--top-k", "3", "--profile-all",
                               "--threads", "2")
    assert code == 0 and outcome == {"node": "10.0.0.2", "pid": 7, "cache_hit": False}
    (call,) = calls
    assert call["config"] == {"seed": 0, "threads": 2, "max_candidates": 3, "profile_all": True}
    assert call["backend"] == "cpu" and call["budget"] == 2.0
    assert call["graphs"] == ["examples/lora.json"]


def test_without_them_the_task_keeps_superoptimizes_defaults(monkeypatch, tmp_path):
    code, calls, _ = run(monkeypatch, tmp_path)
    assert code == 0
    assert calls[0]["config"] == {"seed": 0}
