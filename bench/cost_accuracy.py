"""How well a cost model ranks and predicts measured candidates: the figures that
bench/cost_model.py reports for a GPU run and for --run-cpu alike.

- MAPE: mean |predicted - measured| / measured over every candidate with both, and over those
  measured above 100 µs;
- Kendall τ per graph between predicted and measured times (graphs with two or more candidates);
- top-1 hit rate: the prediction's first choice within 5% of the measured fastest.
"""
import statistics


def kendall_tau(xs, ys):
    pairs = concordant = discordant = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            pairs += 1
            concordant += s > 0
            discordant += s < 0
    return (concordant - discordant) / pairs if pairs else None


class Accuracy:
    def __init__(self):
        self.errors, self.errors_long, self.taus, self.hits, self.judged = [], [], [], 0, 0

    def add_graph(self, pairs):
        """pairs: (predicted s, measured s) of one graph's candidates. Returns (τ, top-1 hit),
        each None where the graph has fewer than two candidates."""
        for pred, meas in pairs:
            self.errors.append(abs(pred - meas) / meas)
            if meas > 100e-6:
                self.errors_long.append(abs(pred - meas) / meas)
        if len(pairs) < 2:
            return None, None
        tau = kendall_tau([p for p, _ in pairs], [m for _, m in pairs])
        self.taus.append(tau)
        fastest = min(m for _, m in pairs)
        top1 = min(pairs)[1] <= fastest * 1.05
        self.hits += top1
        self.judged += 1
        return tau, top1

    def summary(self, candidates="predicted"):
        """The report's closing lines; `candidates` names what the model's figures are called."""
        lines = []
        if self.errors:
            lines.append(f"MAPE over {len(self.errors)} candidates: "
                         f"{statistics.mean(self.errors):.0%}"
                         + (f"; over the {len(self.errors_long)} measured above 100 µs: "
                            f"{statistics.mean(self.errors_long):.0%}" if self.errors_long
                            else "; none above 100 µs"))
        if self.taus:
            lines.append(f"Kendall τ over {len(self.taus)} graphs with two or more {candidates} "
                         f"candidates: median {statistics.median(self.taus):.2f} (range "
                         f"{min(self.taus):.2f} to {max(self.taus):.2f})")
            lines.append(f"top-1 hit rate (first choice within 5% of the fastest): "
                         f"{self.hits}/{self.judged}")
        return lines
