"""Ctrl-C during a search raises KeyboardInterrupt in the caller, with no crash and no hang: the
binding polls for signals while the search runs, and SearchOptions::should_stop stops the search
at its next poll."""
import signal
import subprocess
import sys
import time

SCRIPT = r"""
import sys, threading, time
import yirage as yr

g = yr.new_kernel_graph()
x = g.new_input(dims=(64, 512), dtype=yr.float32)
w1 = g.new_input(dims=(512, 512), dtype=yr.float32)
w2 = g.new_input(dims=(512, 512), dtype=yr.float32)
g.mark_output(g.mul(g.silu(g.matmul(g.rms_norm(x, normalized_shape=(512,)), w1)), g.matmul(x, w2)))

ticks = 0
def count():  # runs only while the search has released the GIL
    global ticks
    while True:
        ticks += 1
        time.sleep(0.01)
threading.Thread(target=count, daemon=True).start()

print("searching", flush=True)
try:
    g.superoptimize(budget=2, config={"threads": 1})
except KeyboardInterrupt:
    print(f"KeyboardInterrupt ticks={ticks}", flush=True)
    sys.exit(3)
print("finished without the interrupt", flush=True)
"""


def test_ctrl_c_interrupts_a_search_cleanly():
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "searching"
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 3, f"{stdout}\n{stderr}"
    assert "yirage: interrupted" in stderr
    # Another Python thread kept running during the search: the GIL was released.
    ticks = int(stdout.split("ticks=")[1])
    assert ticks >= 20, stdout
