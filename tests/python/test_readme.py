"""Every example in README.md runs: each `$ yirage ...` line of a console block, and each JSON
kernel graph, which must load and execute."""
import json
import re
import shlex
import subprocess


def blocks(readme: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme, flags=re.S)


def test_readme_has_examples(source_dir):
    readme = (source_dir / "README.md").read_text()
    assert blocks(readme, "console"), "README lost its console examples"
    assert blocks(readme, "json"), "README lost its JSON example"


def test_console_examples_run(yirage_bin, source_dir):
    readme = (source_dir / "README.md").read_text()
    commands = [line[2:] for block in blocks(readme, "console")
                for line in block.splitlines() if line.startswith("$ ")]
    assert commands
    for command in commands:
        argv = shlex.split(command, comments=True)
        assert argv[0] == "yirage", command
        result = subprocess.run([yirage_bin, *argv[1:]], cwd=source_dir,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"


def test_json_examples_load_and_run(yirage_bin, source_dir, tmp_path):
    readme = (source_dir / "README.md").read_text()
    for i, text in enumerate(blocks(readme, "json")):
        path = tmp_path / f"example{i}.json"
        path.write_text(text)
        json.loads(text)
        for args in (["graph", "show", str(path)], ["run", str(path), "--backend", "reference"]):
            result = subprocess.run([yirage_bin, *args], capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
