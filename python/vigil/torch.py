"""vigil.torch: the Vigil adapter for plain PyTorch training loops (SPEC §8).

    from vigil.torch import Monitor
    mon = Monitor(model, optimizer, rules="train.rules", checkpoint_dir="ckpt")
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        d = mon.after_backward(step, loss)          # the rules run here
        if not d.skip_step:
            optimizer.step()
        if mon.after_step(step).stop or d.stop:     # checkpoints are written here
            break

The semantics are those of the C++ adapter (include/vigil/torch.hpp,
docs/torch.md): the series `loss`, `lr` (first param group), `step_time`
(seconds between after_backward calls), the Spot series `run_time`,
`preempted` and `cost` (docs/spot.md; run_time is also the observations'
time), host scalars, and the tensor series
`grad{layer=NAME}`, `weight{layer=NAME}` per named parameter and
`activation{layer=NAME}` for watched modules, each handed to the engine only
when some rule reads one of its stats. The standard actions are carried out
for real, after the engine has evaluated (never from inside it): checkpoint
(atomic), rollback (model, optimizer, RNG, host state), reduce_lr (every param
group), skip_step, stop, pause_and_snapshot, and log / alert through the
`logging` logger "vigil". Errors of actions (no checkpoint to roll back to, an
unwritable directory) are logged and listed in Decision.errors, never raised.

Not thread-safe: one Monitor per training loop.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import io
import logging
import math
import os
import random
import re
import signal
import time
from typing import Any, Callable, Dict, List, Optional, Union

import torch

from . import _vigil

__all__ = ["Monitor", "Decision", "CheckpointInfo", "reduce_lr", "learning_rate", "set_learning_rate",
           "allgather", "mean_across"]

STANDARD_ACTIONS = ("log", "alert", "checkpoint", "reduce_lr", "rollback", "skip_step", "stop",
                    "pause_and_snapshot")
# Firings whose actions only log or save are no sign of trouble: they do not
# spoil "last_good" (a `checkpoint` rule would otherwise spoil every checkpoint).
_QUIET_ACTIONS = {"log", "alert", "checkpoint"}
_CKPT = re.compile(r"^ckpt-(\d+)\.pt$")


def learning_rate(optimizer: torch.optim.Optimizer) -> float:
    """The lr of the first param group (NaN if the optimizer has none)."""
    groups = optimizer.param_groups
    return float(groups[0]["lr"]) if groups else math.nan


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Sets the lr of every param group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def reduce_lr(optimizer: torch.optim.Optimizer, factor: float, min_lr: float = 0.0) -> float:
    """Multiplies every param group's lr by `factor`, not below `min_lr` (a
    group already at or below it is left alone). Returns the first group's lr."""
    for group in optimizer.param_groups:
        lr = float(group["lr"])
        if lr <= min_lr:
            continue
        group["lr"] = max(lr * factor, min_lr)
    return learning_rate(optimizer)


def allgather(group=None):
    """An Engine `allgather` over a torch.distributed process group (the
    default group if None): every process hands over its buffer of tensor
    stats and receives all of them, in rank order, so the engine combines them
    into the stats of the whole tensors and every process decides alike (SPEC
    §4). Every process must observe the same tensor series in the same order.

        mon = Monitor(model, opt, rules="train.rules",
                      allgather=vigil.torch.allgather(), reduce_loss=vigil.torch.mean_across)
    """
    import torch.distributed as dist

    def gather(local):
        t = torch.tensor(local, dtype=torch.float64)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, t, group=group)
        return torch.cat(parts).tolist()
    return gather


def mean_across(x: float, group=None) -> float:
    """The mean of `x` over the processes of a torch.distributed group (for
    Monitor's reduce_loss: every process then observes the same loss)."""
    import torch.distributed as dist
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, group=group)
    return t.item() / dist.get_world_size(group)


@dataclasses.dataclass
class Decision:
    """What the host must do after after_backward / after_step."""
    skip_step: bool = False        # do not call optimizer.step() this step
    stop: bool = False             # end training
    stop_reason: str = ""
    rolled_back: bool = False      # model, optimizer and RNG were restored
    restored_step: int = -1        # the restored checkpoint's step
    lr_changed: bool = False       # reduce_lr ran
    firings: List[Any] = dataclasses.field(default_factory=list)  # vigil.Firing of this evaluation
    errors: List[str] = dataclasses.field(default_factory=list)   # actions that could not be done


@dataclasses.dataclass
class CheckpointInfo:
    step: int
    path: str
    metric: float = math.nan  # best_series at that step


def _write_atomically(path: str, data: bytes) -> None:
    """temp file, fsync, rename, fsync of the directory: a reader (or a process
    restarted after SIGKILL / power loss) sees the old file or the new one,
    never a torn one."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:  # numpy is optional for the Monitor
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _is_alarm(firing) -> bool:
    return any(a not in _QUIET_ACTIONS for a in firing.actions)


class Monitor:
    """Watches a torch.nn.Module and its optimizer with Vigil rules and carries
    out the rules' actions. See the module docstring and docs/python.md.

    rules: a rule file path (or list of paths), or a compiled vigil.Program.
    engine: an existing vigil.Engine to use instead (rules/params ignored).
    allgather: multi-process jobs: vigil.torch.allgather(group), so that every
        process evaluates the stats of the whole tensors (see allgather()).
    unbound: "error" (a host action a rule file declares must be bound with
        on() before the first step) or "record" (its firings are only listed).
    checkpoint_dir: where `ckpt-<step>.pt` files go; None disables
        checkpoint / rollback / pause_and_snapshot (they report an error).
    keep_last: checkpoints kept: the newest keep_last, plus last good and best.
    checkpoint_every: also checkpoint in after_step every N steps (0: only
        when a rule says `checkpoint`).
    quiet_steps: a checkpoint is "last_good" if no unquiet step (a rule
        pending or firing, or an alarm) lies within this many steps of it.
    best_series: rollback(to="best") picks the checkpoint with the lowest
        value of this series ("loss" or a scalar() key).
    rollback_restores_engine: rollback also restores the rules' state (off:
        the engine keeps the memory of the fault, as in the C++ adapter).
    pause_timeout_s / continue_after_pause_timeout: pause_and_snapshot waits
        for a `resume` or `stop` file in its snapshot directory, or SIGUSR1,
        at most this long (0: snapshot only).
    logger: a logging.Logger for log/alert and action errors (default "vigil").
    watch_grads / watch_weights: observe gradients / weights at all.
    only_due_tensors: hand the engine a tensor only at the steps where some
        rule needs it, and compute only its due stats (Engine.tensor_due): a
        rule `every 10 steps` on grad_norm costs one step in ten, with the
        firings of collecting every step. False: every step.
    reduce_loss: applied to the loss before it is observed (multi-process:
        the mean over the ranks).
    preemption_signals: when some rule reads `preempted`, handlers for these
        signals (SIGTERM by default; () for none) that only set a flag; the
        next after_backward observes preempted = 1 (docs/spot.md). The
        previous handlers come back in close(). Without such a rule nothing
        is installed, so SIGTERM keeps its meaning.
    preemption_file: a path whose appearance is the notice (what a cloud
        agent or a sidecar polling the metadata endpoint writes).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 rules: Union[str, os.PathLike, List[Any], Any, None] = None, *,
                 engine: Optional[_vigil.Engine] = None,
                 params: Optional[Dict[str, Any]] = None,
                 unbound: str = "error",
                 allgather: Optional[Callable] = None,
                 checkpoint_dir: Union[str, os.PathLike, None] = None,
                 keep_last: int = 5,
                 checkpoint_every: int = 0,
                 quiet_steps: int = 10,
                 best_series: str = "loss",
                 rollback_restores_engine: bool = False,
                 pause_timeout_s: float = 600.0,
                 continue_after_pause_timeout: bool = False,
                 snapshot_window: int = 200,
                 logger: Optional[logging.Logger] = None,
                 watch_grads: bool = True,
                 watch_weights: bool = True,
                 only_due_tensors: bool = True,
                 reduce_loss: Optional[Callable[[float], float]] = None,
                 preemption_signals=(signal.SIGTERM,),
                 preemption_file: Union[str, os.PathLike, None] = None):
        if engine is None:
            if rules is None:
                raise TypeError("Monitor needs rules (a rule file or a vigil.Program) or an engine")
            if isinstance(rules, _vigil.Program):
                program = rules
            else:
                program = _vigil.compile_file(rules)
            engine = _vigil.Engine(program, unbound, params=params, allgather=allgather)
        self.engine = engine
        self.model = model
        self.optimizer = optimizer
        self.checkpoint_dir = os.fspath(checkpoint_dir) if checkpoint_dir is not None else None
        self.keep_last = keep_last
        self.checkpoint_every = checkpoint_every
        self.quiet_steps = quiet_steps
        self.best_series = best_series
        self.rollback_restores_engine = rollback_restores_engine
        self.pause_timeout_s = pause_timeout_s
        self.continue_after_pause_timeout = continue_after_pause_timeout
        self.log = logger or logging.getLogger("vigil")
        self.reduce_loss = reduce_loss
        self.only_due_tensors = only_due_tensors
        #: Host integers saved in checkpoints and restored by rollback/resume
        #: (a data position, an epoch counter...).
        self.host_state: Dict[str, int] = {}

        # Only tensors some rule reads are ever looked at: decided once here.
        self._grads = []
        self._weights = []
        for name, p in model.named_parameters():
            labels = {"layer": name}
            if watch_grads:
                key = _vigil.series_key("grad", labels)
                if engine.tensor_used(key):
                    self._grads.append((key, p))
            if watch_weights:
                key = _vigil.series_key("weight", labels)
                if engine.tensor_used(key):
                    self._weights.append((key, p))
        self._activations: Dict[str, torch.Tensor] = {}
        self._hooks = []
        self._scalars: Dict[str, float] = {}
        self._latest: Dict[str, float] = {}
        self._last_time: Optional[float] = None
        self._queue: List[tuple] = []
        self._alarms: List[int] = []
        self._checkpoints: List[CheckpointInfo] = []
        self._checkpoint_due = False
        self._uses_pause = "pause_and_snapshot" in engine.program.actions
        # Spot (docs/spot.md): the run clock, the preemption notice, the cost.
        self._started = time.monotonic()
        self._run_time_base = 0.0
        self._preempted = False
        self._notice = []  # the signal handler's flag: appending is all it does
        self._previous_handlers = []
        self.preemption_file = os.fspath(preemption_file) if preemption_file is not None else None
        params = engine.program.params
        price = params.get("price_per_hour")
        self._dollars_per_second = None
        if isinstance(price, float):
            processes = params.get("processes", 1.0)
            processes = processes if isinstance(processes, float) else 1.0
            self._dollars_per_second = price * processes / 3600.0
        # The RNG when the previous after_step returned: the start of the next
        # step, for a checkpoint written before a step's update.
        # Copying it costs ~20 us a step: only kept when some evaluation can
        # both checkpoint and stop (the only checkpoint that uses it).
        actions = set(engine.program.actions)
        self._keep_step_rng = bool(self.checkpoint_dir) and "checkpoint" in actions and bool(
            actions & {"stop", "pause_and_snapshot"})
        self._step_rng = _rng_state()
        # Steps up to this one were observed by the engine state resume()
        # restored: a repeated after_backward must not observe them again.
        self._observed_through = None
        if any("preempted" in r["reads"] for r in engine.program.rules):
            for sig in preemption_signals:
                try:
                    previous = signal.signal(sig, self._on_notice)
                except (ValueError, OSError) as e:  # not the main thread
                    self.log.warning("vigil: cannot watch signal %s for preemption: %s", sig, e)
                    continue
                self._previous_handlers.append((sig, previous))
        self._window = collections.deque(maxlen=max(1, snapshot_window))
        self._user_recorder = None
        for name in STANDARD_ACTIONS:
            engine.on(name, self._enqueue)
        self._install_recorder()
        if self.checkpoint_dir:
            self._remove_stale_temp_files()

    # -- what the host hands over ------------------------------------------

    def on(self, action: str, callback) -> None:
        """Binds a host action a rule file declares (`action notify(...)`);
        callback(firing, action) runs during evaluation, like Engine.on."""
        if action in STANDARD_ACTIONS:
            raise ValueError(f"'{action}' is a standard action the Monitor carries out itself")
        self.engine.on(action, callback)

    def activation(self, name: str, x):
        """Watches activations as the tensor series activation{layer=name}.

        With a torch.nn.Module: registers a forward hook on it (the output of
        its latest forward in training mode is observed at the next
        after_backward) and returns the hook's handle. With a tensor: records
        it for the next after_backward and returns it (call it in forward).
        Either way nothing is kept unless some rule reads the series."""
        key = _vigil.series_key("activation", {"layer": name})
        used = self.engine.tensor_used(key)
        if isinstance(x, torch.nn.Module):
            def hook(module, inputs, output, key=key):
                if module.training and isinstance(output, torch.Tensor):
                    self._activations[key] = output.detach()
            if not used:
                return None
            handle = x.register_forward_hook(hook)
            self._hooks.append(handle)
            return handle
        if used:
            self._activations[key] = x.detach()
        return x

    def scalar(self, key: str, value: float) -> None:
        """A host scalar (`accuracy`, `val_loss`...) observed with the next after_backward."""
        value = float(value)
        self._scalars[key] = value
        self._latest[key] = value

    def record(self, target, *, append: bool = False) -> None:
        """Records every observation the engine evaluates: to a Vigil JSONL
        file (a path; `rulecheck run` replays it to the same firings; `append`
        continues one, e.g. after resume()), to a callable(dict), or stops (None)."""
        self._user_recorder = target
        self._record_append = append
        self._install_recorder()

    # -- Spot --------------------------------------------------------------

    def _on_notice(self, signum, frame) -> None:
        self._notice.append(signum)

    @property
    def run_time(self) -> float:
        """Seconds of training: this process's time since the Monitor was
        made plus the run time saved in the checkpoint it resumed from."""
        return self._run_time_base + (time.monotonic() - self._started)

    @property
    def preempted(self) -> bool:
        """Whether a preemption notice (signal or file) has arrived."""
        if not self._preempted:
            if self._notice:
                self._preempted = True
            elif self.preemption_file and os.path.exists(self.preemption_file):
                self._preempted = True
        return self._preempted

    def close(self) -> None:
        """Puts back the signal handlers the Monitor replaced."""
        for sig, previous in reversed(self._previous_handlers):
            try:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        self._previous_handlers = []

    # -- the loop ----------------------------------------------------------

    def after_backward(self, step: int, loss) -> Decision:
        """Evaluates the rules on this step's loss, gradients, weights (before
        the update), activations, lr and step time, and carries out the
        actions. Call after backward() and before optimizer.step().

        When one evaluation both stops and checkpoints (spot_preemption,
        max_run, budget), the checkpoint is written before this returns: it
        holds the state before this step's update (the RNG as the previous
        after_step left it) and is named for step - 1, so a resumed run redoes
        this step; its repeated after_backward does not observe again (the
        engine state has seen it) and returns an empty Decision."""
        now = time.monotonic()
        if self._observed_through is not None and step <= self._observed_through:
            self._last_time = now
            self._scalars = {}
            self._activations = {}
            return Decision()
        loss = float(loss)
        if self.reduce_loss is not None:
            loss = float(self.reduce_loss(loss))
        values = {"loss": loss, "lr": learning_rate(self.optimizer)}
        if self._last_time is not None:
            values["step_time"] = now - self._last_time
        self._last_time = now
        run_time = self.run_time
        values["run_time"] = run_time
        values["preempted"] = 1.0 if self.preempted else 0.0
        if self._dollars_per_second is not None:
            values["cost"] = run_time * self._dollars_per_second
        self._latest["loss"] = loss
        if self._scalars:
            values.update(self._scalars)
            self._scalars = {}
        tensors = {}
        for key, p in self._grads:
            if p.grad is not None:
                tensors[key] = p.grad
        for key, p in self._weights:
            tensors[key] = p
        if self._activations:
            tensors.update(self._activations)
            self._activations = {}
        d = Decision()
        try:
            # The run clock is the observations' time: `every 30m` is 30
            # minutes of training, and goes on across resumes.
            d.firings = self.engine.observe(step, values, tensors=tensors, time=run_time,
                                            only_due=self.only_due_tensors)
        finally:
            queue, self._queue = self._queue, []
        for f in d.firings:
            if _is_alarm(f) and (not self._alarms or self._alarms[-1] != step):
                self._alarms.append(step)
        # A step where some rule is pending or firing is not quiet either.
        if self.engine.pending and (not self._alarms or self._alarms[-1] != step):
            self._alarms.append(step)
        self._run_queue(queue, step, d)
        if d.stop and self._checkpoint_due and not d.rolled_back:
            # The host may leave its loop now without after_step.
            self._checkpoint_due = False
            try:
                self.checkpoint(step - 1, _rng=self._step_rng, _observed=step)
            except (OSError, RuntimeError, ValueError) as e:
                d.errors.append(f"checkpoint: {e}")
                self.log.error("vigil: checkpoint: %s", e)
        return d

    def after_step(self, step: int) -> Decision:
        """Writes the checkpoint due at this step (a `checkpoint` action, or
        checkpoint_every), so that it holds the updated model."""
        d = Decision()
        periodic = self.checkpoint_every > 0 and step % self.checkpoint_every == 0
        if self._checkpoint_due or periodic:
            self._checkpoint_due = False
            try:
                self.checkpoint(step)
            except (OSError, RuntimeError, ValueError) as e:
                d.errors.append(f"checkpoint: {e}")
                self.log.error("vigil: checkpoint: %s", e)
        if self._keep_step_rng:
            self._step_rng = _rng_state()
        return d

    # -- checkpoints -------------------------------------------------------

    @property
    def checkpoints(self) -> List[CheckpointInfo]:
        return list(self._checkpoints)

    @property
    def last_good(self) -> Optional[CheckpointInfo]:
        """The checkpoint rollback(to="last_good") would pick now, or None."""
        for c in reversed(self._checkpoints):
            if self._is_good(c):
                return c
        return None

    @property
    def best(self) -> Optional[CheckpointInfo]:
        best = None
        for c in self._checkpoints:
            if math.isfinite(c.metric) and (best is None or c.metric < best.metric):
                best = c
        return best

    def checkpoint(self, step: int, *, _rng=None, _observed: Optional[int] = None) -> str:
        """Writes a checkpoint now (atomically) and prunes old ones. Returns
        its path; raises OSError / ValueError if it cannot."""
        if not self.checkpoint_dir:
            raise ValueError("no checkpoint_dir configured")
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = os.path.join(self.checkpoint_dir, f"ckpt-{step:012d}.pt")
        metric = self._latest.get(self.best_series, math.nan)
        # The table inside the file includes the file itself.
        previous = list(self._checkpoints)
        self._checkpoints = [c for c in self._checkpoints if c.step < step]
        self._checkpoints.append(CheckpointInfo(step, path, metric))
        try:
            _write_atomically(path, self._serialize(step, _rng, _observed))
        except BaseException:
            self._checkpoints = previous
            raise
        self._prune()
        return path

    def rollback(self, to: Union[str, int] = "last_good", step: Optional[int] = None) -> int:
        """Restores the checkpoint chosen by `to` ("last_good", "best", or a
        number N: the newest one at least N steps before `step`): model,
        optimizer, RNG and host state (and the engine if
        rollback_restores_engine). Returns its step; raises LookupError if
        there is none, or the last load error."""
        if step is None:
            step = self._checkpoints[-1].step if self._checkpoints else 0
        to_text = str(to)
        if to_text == "last_good":
            candidates = [c for c in reversed(self._checkpoints) if c.step <= step and self._is_good(c)]
        elif to_text == "best":
            b = self.best
            candidates = [b] if b else []
        else:
            try:
                back = int(float(to_text))
            except ValueError:
                raise ValueError(f'rollback: to must be "last_good", "best" or a step count, not "{to_text}"')
            if back < 0:
                raise ValueError(f'rollback: to must be "last_good", "best" or a step count, not "{to_text}"')
            candidates = [c for c in reversed(self._checkpoints) if c.step <= step - back]
        if not candidates:
            raise LookupError(f'rollback(to="{to_text}"): no checkpoint to roll back to')
        error = None
        # A damaged file (a disk problem) falls back to the next older candidate.
        for c in candidates:
            try:
                loaded = self._load(c.path)
            except Exception as e:  # noqa: BLE001 - any load failure means "try the next"
                error = e
                continue
            self.host_state = dict(loaded["host"])
            if self.rollback_restores_engine:
                self.engine.restore_state(loaded["engine"])
                self._alarms = list(loaded["alarms"])
            target = int(loaded["step"])
            # Checkpoints after the target belong to the abandoned trajectory.
            for k in self._checkpoints:
                if k.step > target:
                    _unlink_quietly(k.path)
            self._checkpoints = [k for k in self._checkpoints if k.step <= target]
            return target
        raise error  # type: ignore[misc]

    def resume(self, path: Union[str, os.PathLike]) -> int:
        """Restores everything a checkpoint holds, the rules' state and the
        Monitor's bookkeeping included (a restarted process continuing a run).
        Returns the checkpoint's step; the loop continues at step + 1."""
        path = os.fspath(path)
        loaded = self._load(path)
        self.engine.restore_state(loaded["engine"])
        self.host_state = dict(loaded["host"])
        self._alarms = list(loaded["alarms"])
        # The run clock goes on from the saved reading (this process's own
        # time since the Monitor was made is added: start-up is paid for too).
        self._run_time_base = float(loaded.get("run_time", 0.0))
        self._observed_through = max(int(loaded.get("observed", loaded["step"])), int(loaded["step"]))
        self._step_rng = _rng_state()
        directory = os.path.dirname(path)
        self._checkpoints = []
        for s, metric in loaded["table"]:
            p = os.path.join(directory, f"ckpt-{s:012d}.pt")
            if os.path.exists(p):
                self._checkpoints.append(CheckpointInfo(s, p, metric))
        self._last_time = None
        return int(loaded["step"])

    @staticmethod
    def latest_checkpoint(directory: Union[str, os.PathLike]) -> Optional[str]:
        """The newest checkpoint in `directory` (by step), None if none.
        Temp files of interrupted writes are never picked."""
        best, best_step = None, -1
        try:
            names = os.listdir(directory)
        except OSError:
            return None
        for name in names:
            m = _CKPT.match(name)
            if m and int(m.group(1)) > best_step:
                best_step, best = int(m.group(1)), os.path.join(os.fspath(directory), name)
        return best

    # -- internals ---------------------------------------------------------

    def _enqueue(self, firing, action) -> None:
        # Called by the engine during evaluation: the actions are carried out
        # once observe() has returned (the engine must not be re-entered).
        explanation = ""
        if action.name == "pause_and_snapshot":
            explanation = (f"rule {firing.key} fired at step {firing.step}:\n"
                           f"{self.engine.explain(firing)}")
        self._queue.append((action.name, action.args, firing, explanation))

    def _install_recorder(self) -> None:
        target = self._user_recorder
        append = getattr(self, "_record_append", False)
        if not self._uses_pause:
            if target is None or callable(target):
                self.engine.record(target)
            else:
                self.engine.record(target, append=append)
            return
        forward = None
        if callable(target):
            forward = target
        elif target is not None:
            # The engine's recorder slot keeps the pause window; the file is
            # written here, in the engine's own JSONL form.
            f = open(os.fspath(target), "a" if append else "w", encoding="utf-8")

            def forward(obs, f=f):
                f.write(_vigil.to_jsonl(obs) + "\n")
                f.flush()
        window = self._window

        def recorder(obs):
            window.append(obs)
            if forward is not None:
                forward(obs)
        self.engine.record(recorder)

    def _remove_stale_temp_files(self) -> None:
        # A process killed while writing leaves `.ckpt-*.pt.tmp.<pid>`; the
        # writer is gone if its pid is.
        try:
            names = os.listdir(self.checkpoint_dir)
        except OSError:
            return
        for name in names:
            m = re.match(r"^\.ckpt-\d+\.pt\.tmp\.(\d+)$", name)
            if not m:
                continue
            pid = int(m.group(1))
            alive = pid == os.getpid()
            if not alive:
                try:
                    os.kill(pid, 0)
                    alive = True
                except ProcessLookupError:
                    alive = False
                except PermissionError:
                    alive = True
            if not alive:
                _unlink_quietly(os.path.join(self.checkpoint_dir, name))

    def _is_good(self, c: CheckpointInfo) -> bool:
        i = bisect.bisect_left(self._alarms, c.step - self.quiet_steps)
        return i == len(self._alarms) or self._alarms[i] > c.step + self.quiet_steps

    def _prune(self) -> None:
        keep_last = max(self.keep_last, 1)
        if len(self._checkpoints) <= keep_last:
            return
        kept = {c.step for c in self._checkpoints[-keep_last:]}
        for special in (self.last_good, self.best):
            if special is not None:
                kept.add(special.step)
        rest = []
        for c in self._checkpoints:
            if c.step in kept:
                rest.append(c)
            else:
                _unlink_quietly(c.path)
        self._checkpoints = rest

    def _serialize(self, step: int, rng=None, observed: Optional[int] = None) -> bytes:
        payload = {
            "format": "vigil.torch.Monitor/1",
            "step": step,
            "observed": observed if observed is not None else step,
            "run_time": self.run_time,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": rng if rng is not None else _rng_state(),
            "engine": self.engine.save_state(),
            "host": dict(self.host_state),
            "alarms": list(self._alarms),
            "table": [(c.step, c.metric) for c in self._checkpoints],
        }
        buf = io.BytesIO()
        torch.save(payload, buf)
        return buf.getvalue()

    def _load(self, path: str) -> Dict[str, Any]:
        """Reads and checks the whole file before anything is applied; then
        applies model, optimizer and RNG state and returns the rest."""
        with open(path, "rb") as f:
            data = f.read()
        loaded = torch.load(io.BytesIO(data), map_location="cpu")
        if not isinstance(loaded, dict) or loaded.get("format") != "vigil.torch.Monitor/1":
            raise ValueError(f"{path} is not a vigil checkpoint")
        self.model.load_state_dict(loaded["model"])
        self.optimizer.load_state_dict(loaded["optimizer"])
        _set_rng_state(loaded["rng"])
        return loaded

    def _run_queue(self, queue, step: int, d: Decision) -> None:
        done = set()  # (rule, action): once per evaluation, except log/alert
        explanations = "".join(q[3] + "\n" for q in queue if q[0] == "pause_and_snapshot")
        paused = False
        for name, args, firing, _ in queue:
            if name not in ("log", "alert"):
                if (firing.rule, name) in done:
                    continue
                done.add((firing.rule, name))
            value = firing.value
            if name == "log":
                self.log.info("vigil: step %d: %s fired (value %s)", firing.step, firing.key, value)
            elif name == "alert":
                self.log.warning("vigil: ALERT step %d: %s: %s", firing.step, firing.key,
                                 args.get("message", ""))
            elif name == "checkpoint":
                self._checkpoint_due = True
            elif name == "skip_step":
                d.skip_step = True
            elif name == "stop":
                d.stop = True
                d.stop_reason = str(args.get("reason", "")) or firing.rule
            elif name == "reduce_lr":
                lr = reduce_lr(self.optimizer, float(args.get("factor", 0.1)), float(args.get("min_lr", 0.0)))
                d.lr_changed = True
                self.log.info("vigil: step %d: %s -> reduce_lr, lr now %g", step, firing.rule, lr)
            elif name == "rollback":
                if d.rolled_back:
                    continue
                to = args.get("to", "last_good")
                if isinstance(to, float) and to.is_integer():
                    to = int(to)
                try:
                    target = self.rollback(to, step)
                except Exception as e:  # noqa: BLE001 - reported, never raised
                    msg = f"rollback: {e}" if not str(e).startswith("rollback") else str(e)
                    d.errors.append(msg)
                    self.log.error("vigil: %s", msg)
                    continue
                d.rolled_back = True
                d.restored_step = target
                d.skip_step = True  # the gradients belong to the abandoned state
                self.log.warning("vigil: step %d: %s -> rollback to checkpoint of step %d",
                                 step, firing.rule, target)
            elif name == "pause_and_snapshot":
                if paused:
                    continue
                paused = True
                if not self._pause_and_snapshot(step, explanations, d.errors):
                    d.stop = True
                    d.stop_reason = "stopped after pause_and_snapshot"

    def _pause_and_snapshot(self, step: int, explanations: str, errors: List[str]) -> bool:
        """Checkpoint + recent observations + explanations into
        <checkpoint_dir>/snapshots/step-S/, then waits for `resume` / `stop`
        there or SIGUSR1. Returns False if training should stop."""
        if not self.checkpoint_dir:
            errors.append("pause_and_snapshot: no checkpoint_dir configured")
            return True
        directory = os.path.join(self.checkpoint_dir, "snapshots", f"step-{step}")
        try:
            os.makedirs(directory, exist_ok=True)
            window = "".join(_vigil.to_jsonl(o) + "\n" for o in self._window)
            outcome = "continues" if self.continue_after_pause_timeout else "stops"
            readme = (f"vigil paused training at step {step}.\n"
                      f"create a file named `resume` here (or send SIGUSR1 to pid {os.getpid()}) to "
                      f"continue,\nor a file named `stop` to end training; after {self.pause_timeout_s} s "
                      f"it {outcome}.\n")
            _write_atomically(os.path.join(directory, f"ckpt-{step:012d}.pt"), self._serialize(step))
            _write_atomically(os.path.join(directory, "window.jsonl"), window.encode())
            _write_atomically(os.path.join(directory, "explanation.txt"), explanations.encode())
            _write_atomically(os.path.join(directory, "README.txt"), readme.encode())
        except OSError as e:
            errors.append(f"pause_and_snapshot: {e}")
            return True
        self.log.warning("vigil: paused at step %d, snapshot in %s", step, directory)
        if self.pause_timeout_s <= 0:
            return True
        resumed = []
        previous = None
        try:
            previous = signal.signal(signal.SIGUSR1, lambda *_: resumed.append(True))
        except ValueError:  # not the main thread: files only
            previous = None
        go_on = self.continue_after_pause_timeout
        deadline = time.monotonic() + self.pause_timeout_s
        try:
            while time.monotonic() < deadline:
                if resumed or os.path.exists(os.path.join(directory, "resume")):
                    go_on = True
                    break
                if os.path.exists(os.path.join(directory, "stop")):
                    go_on = False
                    break
                # Waiting for a person: a file check every 50 ms costs nothing.
                time.sleep(0.05)
        finally:
            if previous is not None:
                signal.signal(signal.SIGUSR1, previous)
        self.log.warning("vigil: %s after pause at step %d", "continuing" if go_on else "stopping", step)
        return go_on
