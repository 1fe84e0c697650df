"""The training progress bar (rank 0): tqdm when installed, else a line per log interval."""

from __future__ import annotations

import sys


class Progress:
    """tqdm when installed, else a line every ``log_every`` steps (rank 0 only).

    Under the time clock (``lr_clock="time"``) the bar measures the budget's time, with the
    step count beside it: such a run's ``max_steps`` is usually a ceiling it never reaches, and
    tqdm's estimate from it (hours for a 22-minute run) would be wrong by the whole difference.
    Under the step clock ``max_minutes`` is only a cap, and the bar counts steps.
    """

    def __init__(
        self, enabled: bool, total: int, initial: int, budget_s: float = 0.0, finish_s: float = 0.0
    ) -> None:
        self.enabled, self.total, self.bar = enabled, total, None
        self.initial, self.budget_s, self.finish_s = initial, budget_s, finish_s
        self.loss: float | None = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            if budget_s > 0:
                form = "{percentage:3.0f}%|{bar}| {desc}"  # desc: the text, without tqdm's ": "
                desc = self._budget_text(initial, 0.0)
                self.bar = tqdm(total=budget_s, bar_format=form, desc=desc, dynamic_ncols=True)
            else:
                self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def _budget_text(self, step: int, elapsed_s: float) -> str:
        budget = f"{_clock(elapsed_s)}/{_clock(self.budget_s)} budget"
        if self.finish_s:
            budget += f" (+{_clock(self.finish_s)} after the steps)"
        text = f"step {step}, {budget}, {_clock(max(0.0, self.budget_s - elapsed_s))} left"
        if step > self.initial and elapsed_s > 0:
            text += f", {(step - self.initial) / elapsed_s:.2f} steps/s"
        if self.loss is not None:
            text += f", loss={self.loss:.4g}"
        return text

    def update(
        self, step: int, loss: float | None, steps_per_s: float | None, elapsed_s: float = 0.0
    ) -> None:
        if not self.enabled:
            return
        if loss is not None:
            self.loss = loss
        if self.bar is not None and self.budget_s > 0:
            self.bar.set_description_str(self._budget_text(step, elapsed_s), refresh=False)
            # tqdm redraws on its own clock (mininterval), so most steps only move the count
            self.bar.update(min(elapsed_s, self.budget_s) - self.bar.n)
        elif self.bar is not None:
            self.bar.update(1)
            if loss is not None:
                self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        elif loss is not None and self.budget_s > 0:
            print(self._budget_text(step, elapsed_s), file=sys.stderr, flush=True)
        elif loss is not None:
            print(
                f"step {step}/{self.total}  loss {loss:.4g}  {steps_per_s:.2f} steps/s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    """``MM:SS``, or ``H:MM:SS`` from an hour on, as tqdm writes times."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
