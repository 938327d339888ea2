"""The plain-loop monitor: built from the model and the optimizer, one call per step.

::

    mon = Monitor(model, optimizer, out="runs/name", scheduler=sched)
    for batch in loader:
        logits = model(batch["input_ids"]); loss = ...
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # optional
        optimizer.step(); sched.step(); optimizer.zero_grad()
        mon.step(loss=loss, batch=batch, logits=logits)
    mon.close()

What is measured where (so each figure is the one the docs promise):

- an optimizer step pre-hook (the moment ``optimizer.step()`` starts, grads final and,
  under a GradScaler, unscaled): the LR of every param group (the LR this step uses),
  the global gradient norm (the norm ``clip_grad_norm_`` computed when the user clipped,
  seen through :mod:`trainlens.monitor._clip`; else computed here, so it is pre-clip
  either way), and every ``every`` steps the per-tensor gradient norms and a copy of the
  weights;
- an optimizer step post-hook: on those steps ‖ΔW‖/‖W‖ per tensor and global;
- a forward pre-hook on the model: when the step's compute began, so the time since the
  previous step ended is the dataloader wait;
- :meth:`Monitor.step`: loss, tokens and samples of the batch, padding, entropy, step time,
  memory, loss scale. It may be called on every micro-batch: a record is written once per
  optimizer step, its loss the mean over the step's micro-batches.

Figures stay tensors until a flush, and the last arithmetic on them (divisions, sums of
squares, the entropy's per-position reduction) is left to the conversion
(:mod:`trainlens.monitor.records`): the hot path is built for op count. A flush comes
every ``flush_every`` steps, or sooner when the records waiting would otherwise be
``flush_seconds`` old by the next step (at 1 step/s a record is on disk within about a
second, not 50), and at once after a step that logged a non-finite value the host can
see without a sync (see :meth:`Monitor.step`). A flush hands the records to the writer
thread (:mod:`trainlens.monitor.writer`), which turns them into numbers in one host
transfer and writes them: the training thread never converts or writes (no sync on the
hot path on an accelerator either), except with several ranks, where the whole values of
sharded tensors are gathered at the flush on the training thread (a collective), and
with ``on_finding`` / ``stop_on``, whose judging reads the file at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from trainlens.core.runstate import end_record
from trainlens.monitor import _clip, _ending, records, stats
from trainlens.monitor.hardware import Hardware
from trainlens.monitor.records import CALCS, Ratio, Scalar, Value
from trainlens.monitor.schedule import declared_schedule
from trainlens.monitor.sink import JsonlSink, TensorBoardSink, write_config
from trainlens.monitor.writer import Writer

#: per-tensor statistics every 10 steps: see docs/monitor.md (overhead table)
DEFAULT_EVERY = 10
#: records kept in memory before one host transfer and write
DEFAULT_FLUSH = 50
#: ... and no record waits longer than this (seconds) for its write: the watch sees a
#: record this late at most, whatever the step rate (docs/watch.md, "How late")
DEFAULT_FLUSH_SECONDS = 2.0


class Monitor:
    """Record every optimizer step of ``model`` trained by ``optimizer`` to ``out``.

    ``every``: per-tensor grad norms and update ratios (global and per tensor) every
    ``every`` optimizer steps (the global grad norm, LR, loss, entropy, padding, timing and
    memory every step). ``scheduler``:
    the LR scheduler, read for the declared schedule (``schedule=`` declares it by hand).
    ``scaler``: a GradScaler, for the loss scale. ``config``: more keys for the run config
    (e.g. ``seq_len``, ``n_layer``, ``n_head``, ``head_dim``). ``gpu`` / ``dtype``: override
    what is detected (MFU needs both and the model size). ``hook_optimizer=False``: the
    caller calls :meth:`before_step` itself (the Lightning callback does).
    ``on_finding``: called with each new :class:`~trainlens.core.findings.Finding` of the
    run so far (the detectors of ``trainlens analyze``, duty-cycled: see
    :mod:`trainlens.monitor.judge`); ``stop_on="error"`` (or "warning"): :attr:`stopped`
    says why once a finding at that severity appears (the callbacks stop the trainer).
    With either, every record is written at once (a host sync per step on a GPU).
    ``flush_every``: records written together (default 50); ``flush_seconds``: ... and
    none waits longer than this for its write (default 2 s; None: by count only; a record
    with a NaN or an infinity is written at once); ``flush_clock``: the clock of that
    (default ``time.monotonic``, one read per optimizer step). ``clock``: the timer of
    ``step_time`` and ``dataloader_wait`` (seconds; default the wall clock,
    ``time.perf_counter``): fixtures/make_runs.py passes process CPU time plus its
    injected sleeps, so other processes on a shared machine put no throughput shift into
    runs that did not inject one. ``resume_step``: the optimizer steps already taken (a
    run resumed from the checkpoint of that step): the next record is ``resume_step + 1``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        out: str | Path = "runs/run",
        *,
        every: int = DEFAULT_EVERY,
        scheduler: Any = None,
        scaler: Any = None,
        schedule: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        gpu: str | None = None,
        dtype: str | None = None,
        flush_every: int = DEFAULT_FLUSH,
        flush_seconds: float | None = DEFAULT_FLUSH_SECONDS,
        flush_clock: Callable[[], float] = time.monotonic,
        tensorboard: bool = False,
        hook_optimizer: bool = True,
        on_finding: Callable[[Any], None] | None = None,
        stop_on: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
        resume_step: int = 0,
    ) -> None:
        if every < 1 or flush_every < 1:
            raise ValueError("every and flush_every must be at least 1")
        if flush_seconds is not None and not flush_seconds > 0:
            raise ValueError("flush_seconds must be above 0 (or None)")
        self.model = model
        self.optimizer: torch.optim.Optimizer = getattr(optimizer, "optimizer", optimizer)
        self.out = Path(out)
        self.every = every
        self.flush_every = flush_every
        self.flush_seconds = math.inf if flush_seconds is None else float(flush_seconds)
        self._flush_clock = flush_clock
        self._oldest = 0.0  # flush clock at the first record waiting
        # flush clock at the last record made (at first: now, so that a first step that
        # takes longer than flush_seconds is written at once too)
        self._last_record = flush_clock()
        self._shared_step_time = 0.0  # the slowest rank's, as last gathered (several ranks)
        self.scaler = scaler
        self._clock = clock
        self.opt_step = resume_step  # optimizer steps seen (the step number of the last one)
        self._named = [(n, p) for n, p in model.named_parameters()]
        self._names = [n for n, _ in self._named]
        self._params: list[torch.Tensor] = [p for _, p in self._named]
        self._grad_keys = [f"grad_norm/{n}" for n in self._names]
        self._ratio_keys = [f"update_ratio/{n}" for n in self._names]
        self._opt_params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self._param_ids = {id(p) for p in self._opt_params}
        self._clip: tuple[torch.Tensor, float] | None = None
        self._fig: dict[str, Value] = {}  # figures of the current optimizer step
        self._snapshot: list[torch.Tensor] | None = None
        self._micro: dict[str, list[Any]] = {}
        self._tokens: int | None = None
        self._samples: int | None = None
        self._records: list[dict[str, Value]] = []
        self._urgent = False  # the last record holds a NaN or an infinity
        self._written = resume_step  # last optimizer step turned into a record
        self._last_end: float | None = None
        self._fwd_start: float | None = None
        self.hw = Hardware.detect(model, scaler=scaler, gpu=gpu, dtype=dtype)
        # several ranks: params may be DTensors (a fused copy: one op to shard-propagate)
        self._several = self.hw.world_size > 1
        #: why the run should stop (``stop_on`` met), else None: the loop checks it
        self.stopped: str | None = None
        self._judge = None
        if on_finding is not None or stop_on is not None:
            from trainlens.monitor.judge import Judge

            self._judge = Judge(on_finding, stop_on)
        sinks: list[Any] = []
        self._hooks: list[Any] = []
        self._closed = False
        if self.hw.rank == 0:
            sinks.append(JsonlSink(self.out))
            if tensorboard:
                sinks.append(TensorBoardSink(self.out))
            self._write_config(scheduler, schedule, config)
        self._writer = Writer(sinks, self._to_rows, str(self.path))
        if hook_optimizer:
            self._hooks.append(self.optimizer.register_step_pre_hook(self._pre_hook))
        self._hooks.append(self.optimizer.register_step_post_hook(self._post_hook))
        self._hooks.append(model.register_forward_pre_hook(self._forward_pre_hook))
        _clip.install()
        _clip.ACTIVE.add(self)
        _ending.track(self)

    def add_sink(self, sink: Any) -> None:
        """Also write every record to ``sink`` (``write(records)``, ``close()``), on the
        rank that writes (the callbacks add their framework's loggers this way). Its
        ``write`` is called on the training thread, at the monitor's next call after the
        writer thread converted the records, unless the sink says ``thread_safe = True``
        (then on the writer thread)."""
        if self.hw.rank == 0:
            self._writer.add_sink(sink)

    @property
    def path(self) -> Path:
        """The metrics file."""
        return self.out / "metrics.jsonl"

    # ---- run config ------------------------------------------------------------------

    def _write_config(
        self, scheduler: Any, schedule: Mapping[str, Any] | None, extra: Mapping[str, Any] | None
    ) -> None:
        cfg: dict[str, Any] = {"source": "trainlens.monitor", "first_step": 1}
        cfg.update(self.hw.config())
        cfg["monitor"] = {"every": self.every}
        if schedule:
            cfg["schedule"] = dict(schedule)
        else:
            declared, note = declared_schedule(scheduler)
            if declared:
                cfg["schedule"] = declared
            elif note:
                cfg["schedule_note"] = note
        if "schedule" in cfg:
            cfg["schedule"].setdefault("first_step", 1)
        cfg.update(extra or {})
        write_config(self.out, cfg)

    # ---- hooks -------------------------------------------------------------------------

    def _saw_clip(self, params: list[torch.Tensor], max_norm: float, total: torch.Tensor) -> None:
        if params and id(params[0]) in self._param_ids and self._clip is None:
            self._clip = (total.detach(), max_norm)

    def _forward_pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        if self._fwd_start is None and module.training:
            self._fwd_start = self._clock()

    def mark_start(self) -> None:
        """The step's compute begins now (its batch is in hand): what came before since
        the last step was the dataloader wait. The model's forward pre-hook calls this;
        a framework whose training step does not call the model's forward calls it too."""
        if self._fwd_start is None:
            self._fwd_start = self._clock()

    def _pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.before_step()

    def _tensor_step(self, step: int) -> bool:
        return step == 1 or step % self.every == 0

    def before_step(self) -> None:
        """Figures of the optimizer step about to run: its LRs and pre-clip grad norms."""
        self.opt_step += 1
        fig: dict[str, Value] = {}
        for i, group in enumerate(self.optimizer.param_groups):
            fig["lr" if i == 0 else f"lr/group{i}"] = float(group["lr"])
        per_tensor = self._tensor_step(self.opt_step)
        clip, self._clip = self._clip, None
        if clip is not None:
            fig["grad_norm"] = clip[0]
        elif not per_tensor:
            grads = [p.grad for p in self._opt_params if p.grad is not None]
            fig["grad_norm"] = stats.global_norm(stats.norms(grads))
        if per_tensor:
            self._tensor_grad_norms(fig, clip)
            with torch.no_grad():
                self._snapshot = stats.copies(self._params, fused=self._several)
        self._fig = fig

    def _tensor_grad_norms(
        self, fig: dict[str, Value], clip: tuple[torch.Tensor, float] | None
    ) -> None:
        """Per-tensor grad norms: one fused norm and one stack on the hot path, the clip
        factor and the names at the conversion (:func:`records.grad_norms`)."""
        grads = [p.grad for p in self._params]
        with_grad = [g is not None for g in grads]
        got = stats.norms([g for g in grads if g is not None])
        per = torch.stack(got) if got else None
        if per is not None:
            fig[CALCS + "grad_norm/"] = records.grad_norms(self._grad_keys, with_grad, per, clip)
        else:
            fig.update(dict.fromkeys(self._grad_keys, 0.0))
        if clip is None:
            # the optimizer's params are usually the model's: one norm computation for both
            mine = {id(g) for g in grads if g is not None}
            rest = [
                p.grad for p in self._opt_params if p.grad is not None and id(p.grad) not in mine
            ]
            if rest or per is None:
                fig["grad_norm"] = stats.global_norm(got + stats.norms(rest))
            else:
                fig["grad_norm"] = torch.linalg.vector_norm(per)

    def _post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._clip = None  # a clip after before_step (Lightning) belongs to no later step
        old, self._snapshot = self._snapshot, None
        if old is None:
            return
        with torch.no_grad():
            torch._foreach_sub_(old, self._params)  # the copy becomes -ΔW (in place)
            # the norms of ΔW and of W in one fused call and one stack; the ratios at the
            # conversion
            got = torch.stack(stats.norms(old + self._params))
        self._fig[CALCS + "update_ratio/"] = records.update_ratios(self._ratio_keys, got)

    # ---- the user's call ---------------------------------------------------------------

    def step(
        self,
        loss: Scalar | None = None,
        batch: Any = None,
        logits: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        tokens: int | None = None,
        samples: int | None = None,
        **extra: Scalar,
    ) -> None:
        """Record a (micro-)batch; after an optimizer step, write that step's record.

        Raises :class:`~trainlens.monitor.writer.WriteError` when the writer thread failed
        to write an earlier flush (a full disk): once per failure, at the first call after
        it, once this step's record is made (and handed over, when it was due).
        """
        now = self._clock()
        self._observe(loss, batch, logits, attention_mask, tokens, samples, extra)
        if self.opt_step == self._written:
            return  # a micro-batch of a step still accumulating gradients
        self._finish(now)
        if self._judge is not None:
            # judging wants every record on disk at once (the judge is duty-cycled itself)
            self.flush()
        elif self._flush_due():
            # a NaN is on disk when this call returns (before a crash can lose it); other
            # flushes are handed over and written while the training goes on
            self.flush(wait=self._urgent)
        else:
            self._writer.check()

    def _flush_due(self) -> bool:
        """After a record was made: write now? When ``flush_every`` records wait, when the
        oldest would be ``flush_seconds`` old by the next record (the step just taken is
        the guess of the next one's length: at 10 s a step every record goes at once, at
        1 step/s every second or so, at 100 steps/s every ``flush_every``), or when the
        record holds a non-finite value (a NaN is on disk before a crash can lose it).
        Costs one clock read and a few float checks per optimizer step.

        With several ranks every rank must flush at the same steps (the flush makes
        FSDP2's DTensors whole, a collective), so the rule there uses only what every rank
        knows alike: the records waiting times the slowest rank's step time, as the last
        gather of per-rank times gave it (every ``every`` steps); no clock of its own and
        no value of its own (a NaN is written at the next flush)."""
        n = len(self._records)
        if self.hw.world_size > 1:
            return n >= self.flush_every or n * self._shared_step_time >= self.flush_seconds
        t = self._flush_clock()
        gap, self._last_record = t - self._last_record, t
        if n == 1:
            self._oldest = t
        self._urgent = records.nonfinite(self._records[-1])
        return self._urgent or n >= self.flush_every or t + gap - self._oldest >= self.flush_seconds

    def _add(self, key: str, value: Any) -> None:
        if value is None:
            return
        if type(value) is Ratio:  # the entropy and padding (the common case: no checks)
            pass
        elif isinstance(value, torch.Tensor):
            value = value.detach()
            if value.ndim:
                if value.numel() != 1:
                    raise ValueError(
                        f"trainlens.monitor: {key!r} must be a number or a one-element "
                        f"tensor, got a tensor of shape {tuple(value.shape)}"
                    )
                value = value.reshape(())
        elif not isinstance(value, (records.Ratio, records.Calc)):
            value = float(value)
        self._micro.setdefault(key, []).append(value)

    def _observe(
        self,
        loss: Scalar | None,
        batch: Any,
        logits: torch.Tensor | None,
        mask: torch.Tensor | None,
        tokens: int | None,
        samples: int | None,
        extra: Mapping[str, Scalar],
    ) -> None:
        self._add("train/loss", loss)
        if batch is not None and (tokens is None or samples is None):
            got_tokens, got_samples = stats.batch_size(batch)
            tokens = tokens if tokens is not None else got_tokens
            samples = samples if samples is not None else got_samples
        if tokens is not None:
            self._tokens = (self._tokens or 0) + tokens
        if samples is not None:
            self._samples = (self._samples or 0) + samples
        if mask is None and batch is not None:
            mask = stats.attention_mask_of(batch)
        padding = None
        if logits is not None:
            # every step: the entropy detector needs a dense series, and the chunked pass
            # costs a few percent of the output layer's own work (see docs/monitor.md)
            entropy, padding = stats.entropy_and_padding(logits, mask)
            self._add("entropy", entropy)
        if padding is None and mask is not None:
            padding = stats.padding_fraction(mask)
        self._add("padding_frac", padding)
        for key, value in extra.items():
            self._add(key, value)

    def _finish(self, now: float) -> None:
        rec: dict[str, Value] = {"step": float(self.opt_step), "time": time.time()}
        for key, values in self._micro.items():
            rec[key] = records.pooled(values)
        rec.update(self._fig)
        start = self._last_end if self._last_end is not None else self._fwd_start
        if start is not None:
            dt = now - start
            rec["step_time"] = dt
            if self._last_end is not None and self._fwd_start is not None:
                rec["dataloader_wait"] = max(0.0, self._fwd_start - self._last_end)
            scale = self.hw.world_size / dt if dt > 0 else math.nan
            if self._tokens:
                rec["tokens_per_sec"] = self._tokens * scale
            if self._samples:
                rec["samples_per_sec"] = self._samples * scale
        if self.hw.world_size > 1 and self._tensor_step(self.opt_step):
            # stragglers: every rank's step time and data wait, gathered every k steps
            mine = {"step_time": math.nan, "dataloader_wait": math.nan}
            mine.update({k: v for k, v in rec.items() if k in mine and isinstance(v, float)})
            gathered = self.hw.per_rank(mine)
            rec.update(gathered)
            times = [
                v for k, v in gathered.items() if k.startswith("step_time/") and math.isfinite(v)
            ]
            self._shared_step_time = max(times, default=self._shared_step_time)
        rec.update(self.hw.memory())
        scale_t = self.hw.loss_scale()
        if scale_t is not None:
            rec["loss_scale"] = scale_t
        self._records.append(rec)
        self._written = self.opt_step
        self._micro, self._fig, self._tokens, self._samples = {}, {}, None, None
        self._last_end, self._fwd_start = self._clock(), None

    # ---- writing -----------------------------------------------------------------------

    def flush(self, wait: bool = False) -> None:
        """Hand the waiting records to the writer thread, which turns them into numbers
        (one host transfer) and writes them; ``wait``: until they are on disk (else
        :meth:`drain` waits for that). Then raise a failure of the writer not yet raised
        (:class:`~trainlens.monitor.writer.WriteError`)."""
        batch, self._records = self._records, []
        if not batch:
            self._writer.check()
            return
        if self.hw.world_size > 1:
            records.make_whole(batch)  # collectives: on the training thread, every rank
        if self._judge is None:
            self._writer.put(batch)
            if wait:
                self._writer.wait()
            self._writer.check()
            return
        rows = self._to_rows(batch)  # the judge reads them, and the file at once
        self._writer.put(rows, converted=True)
        self._writer.wait()
        self._writer.check()
        if self._writer.active:
            why = self._judge.judge(self.path, self._judge.urgent(rows))
            self.stopped = self.stopped or why

    def _to_rows(self, batch: list[dict[str, Value]]) -> list[dict[str, Any]]:
        rows = records.to_numbers(batch)
        for row in rows:
            self.hw.add_mfu(row)
        return rows

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every record handed to the writer is written (False: ``timeout``
        seconds passed first). Records still waiting for their flush are not written:
        :meth:`flush` first for those."""
        done = self._writer.wait(timeout)
        self._writer.check()
        return done

    def log(self, metrics: Mapping[str, Scalar], step: int | None = None) -> None:
        """Write other figures (e.g. ``{"val/loss": v}``) at ``step`` (default: the last
        optimizer step), after the step records waiting."""
        self.flush()
        row: dict[str, Value] = {"step": float(self.opt_step if step is None else step)}
        row.update(
            {k: v.detach() if isinstance(v, torch.Tensor) else float(v) for k, v in metrics.items()}
        )
        row["time"] = time.time()
        self._writer.put([row])

    def close(self, error: BaseException | None = None) -> None:
        """Write what is waiting and the end record (``finished``; ``crashed`` with the
        type of ``error``, the exception that ended the run), remove the hooks, close the
        files. A second call does nothing. A failure of the writer not yet raised is
        raised here (after all of that), unless ``error`` is given: the run's own
        exception is the one that matters then."""
        _ending.untrack(self)
        if self._closed:
            return
        self._closed = True
        failure: BaseException | None = None
        try:
            self.flush()
        except Exception as exc:
            failure = exc
        rec = end_record(self.opt_step, time.time(), error=error, stopped=self.stopped)
        self._writer.end(rec)
        for h in self._hooks:
            h.remove()
        self._hooks = []
        _clip.ACTIVE.discard(self)
        try:
            self._writer.close()
        except Exception as exc:
            failure = failure or exc
        if failure is not None and error is None:
            raise failure

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        self.close(error=error)
