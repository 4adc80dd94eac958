"""Vigil rules inside the trainers people use (docs/python.md, "Callbacks").

    from vigil.callbacks import HFCallback, LightningCallback
    trainer = transformers.Trainer(..., callbacks=[HFCallback("train.rules")])
    trainer = lightning.Trainer(..., callbacks=[LightningCallback("train.rules", checkpoint_dir="ckpt")])

Neither library is a dependency: when `transformers` (or `lightning` /
`pytorch_lightning`) is importable the classes derive from its
TrainerCallback (Callback), so the trainers accept them; otherwise they are
plain classes of the same shape. Hook signatures followed: Hugging Face
transformers 4.44 `TrainerCallback` and Lightning 2.4 `Callback`.

The trainer owns the loop, the optimizer step and the checkpoints, so the
actions map onto its controls:

| action             | Hugging Face                          | Lightning                              |
|--------------------|---------------------------------------|----------------------------------------|
| stop               | control.should_training_stop = True   | trainer.should_stop = True             |
| checkpoint         | control.should_save = True            | trainer.save_checkpoint(checkpoint_dir)|
| reduce_lr          | every param group (+ scheduler base)  | every optimizer's param groups (+ base)|
| skip_step          | grads dropped in on_pre_optimizer_step| grads dropped in on_before_optimizer_step|
| log / alert        | logging (logger "vigil")              | logging (logger "vigil")               |
| rollback, pause_and_snapshot | reported in .errors (use vigil.torch.Monitor) | same            |

skip_step drops every parameter's .grad before the optimizer step (torch
optimizers skip parameters without a gradient: no update, no moment change),
so it takes effect when the rule fires at the pre-optimizer hook, i.e. on
tensor series (grad_norm...) observed there; a rule on the logged loss fires
after the step and its skip_step is reported in .errors.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional

from . import _vigil

__all__ = ["HFCallback", "LightningCallback"]

_UNSUPPORTED = {"rollback", "pause_and_snapshot"}
_STANDARD = ("log", "alert", "checkpoint", "reduce_lr", "rollback", "skip_step", "stop",
             "pause_and_snapshot")


def _number(v) -> Optional[float]:
    """A float from a logged value (float, int, 0-d tensor, numpy scalar), or None."""
    if isinstance(v, bool) or isinstance(v, str):
        return None
    try:
        return float(v)
    except (TypeError, ValueError, RuntimeError):
        return None


def _is_eval_key(key: str) -> bool:
    """Lightning's callback_metrics hold train and validation metrics alike;
    by convention the validation ones are named val_* / eval_* (or val/...)."""
    return key.startswith(("val", "eval"))


class _Rules:
    """What both callbacks share: an engine, queued actions, series from tensors."""

    def __init__(self, rules, params=None, engine=None, logger=None, watch_grads=True,
                 watch_weights=True):
        if engine is None:
            program = rules if isinstance(rules, _vigil.Program) else _vigil.compile_file(rules)
            engine = _vigil.Engine(program, params=params)
        self.engine = engine
        self.log = logger or logging.getLogger("vigil")
        self.watch_grads = watch_grads
        self.watch_weights = watch_weights
        self.firings: List[Any] = []   # every firing so far
        self.errors: List[str] = []    # actions that could not be carried out
        self._queue: List[tuple] = []
        self._tensor_keys: Optional[List[tuple]] = None
        for name in _STANDARD:
            engine.on(name, lambda f, a: self._queue.append((f, a.name, a.args)))

    def _observe(self, step, values, mode="train", tensors=None):
        fired = self.engine.observe(int(step), values, mode=mode, tensors=tensors)
        self.firings += fired
        queue, self._queue = self._queue, []
        return queue

    def _tensors(self, model) -> Dict[str, Any]:
        if model is None:
            return {}
        if self._tensor_keys is None:  # decided once: only what some rule reads
            keys = []
            for name, p in model.named_parameters():
                g = _vigil.series_key("grad", {"layer": name})
                w = _vigil.series_key("weight", {"layer": name})
                keys.append((p, g if self.watch_grads and self.engine.tensor_used(g) else None,
                             w if self.watch_weights and self.engine.tensor_used(w) else None))
            self._tensor_keys = [k for k in keys if k[1] or k[2]]
        out = {}
        for p, g, w in self._tensor_keys:
            if g and p.grad is not None:
                out[g] = p.grad
            if w:
                out[w] = p
        return out

    def _reduce_lr(self, optimizers, schedulers, args):
        factor = float(args.get("factor", 0.1))
        min_lr = float(args.get("min_lr", 0.0))
        for opt in optimizers:
            for group in opt.param_groups:
                if group["lr"] > min_lr:
                    group["lr"] = max(group["lr"] * factor, min_lr)
        # Schedulers recompute lr from base_lrs each step: scale those too.
        for sched in schedulers:
            if sched is not None and hasattr(sched, "base_lrs"):
                sched.base_lrs = [max(b * factor, min_lr) if b > min_lr else b for b in sched.base_lrs]

    def _trainer_actions(self, queue):
        """The queued actions _common leaves to the trainer, each rule's action once."""
        done = set()
        for firing, name, fargs in queue:
            if self._common(firing, name, fargs) or (firing.rule, name) in done:
                continue
            done.add((firing.rule, name))
            yield firing, name, fargs

    def _common(self, firing, name, args) -> bool:
        """log / alert / unsupported; True if handled."""
        if name == "log":
            self.log.info("vigil: step %d: %s fired (value %s)", firing.step, firing.key, firing.value)
        elif name == "alert":
            self.log.warning("vigil: ALERT step %d: %s: %s", firing.step, firing.key, args.get("message", ""))
        elif name in _UNSUPPORTED:
            self._error(f"{name} ({firing.rule}, step {firing.step}): not available in a trainer "
                        f"callback (the trainer owns its checkpoints); use vigil.torch.Monitor")
        else:
            return False
        return True

    def _error(self, message):
        self.errors.append(message)
        self.log.error("vigil: %s", message)

    # Rule state travels with the trainer's checkpoints.
    def state_dict(self) -> Dict[str, Any]:
        return {"vigil_engine": self.engine.save_state()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if "vigil_engine" in state_dict:
            self.engine.restore_state(state_dict["vigil_engine"])


def _hf_base():
    try:
        from transformers import TrainerCallback  # type: ignore
        return TrainerCallback
    except ImportError:
        class TrainerCallbackShape:
            """The no-op events of transformers.TrainerCallback (4.44)."""

        for event in ("on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin",
                      "on_epoch_end", "on_step_begin", "on_pre_optimizer_step",
                      "on_optimizer_step", "on_substep_end", "on_step_end", "on_evaluate",
                      "on_predict", "on_save", "on_log", "on_prediction_step"):
            setattr(TrainerCallbackShape, event, lambda self, args, state, control, **kwargs: None)
        return TrainerCallbackShape


class HFCallback(_Rules, _hf_base()):
    """A Hugging Face `TrainerCallback` that runs Vigil rules.

    Observes, at step = state.global_step:
      on_pre_optimizer_step: grad/weight tensor series of kwargs["model"]
        (only those rules read), as the step about to be taken (global_step + 1);
      on_log: the numeric train logs (`loss`, `learning_rate` also as `lr`,
        `grad_norm`, `epoch`...), mode "train";
      on_evaluate: the metrics (`eval_loss`...), mode "eval".
    """

    def __init__(self, rules=None, *, params=None, engine=None, logger=None, watch_grads=True,
                 watch_weights=True):
        _Rules.__init__(self, rules, params, engine, logger, watch_grads, watch_weights)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        tensors = self._tensors(kwargs.get("model"))
        if not tensors:
            return control
        queue = self._observe(state.global_step + 1, {}, tensors=tensors)
        self._apply(queue, control, kwargs, can_skip=True)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if any(k.startswith("eval_") for k in logs):
            return control  # the same metrics reach on_evaluate
        values = {}
        for k, v in logs.items():
            x = _number(v)
            if x is not None:
                values[k] = x
        if "learning_rate" in values and "lr" not in values:
            values["lr"] = values["learning_rate"]
        if values:
            self._apply(self._observe(state.global_step, values), control, kwargs)
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        values = {k: x for k, x in ((k, _number(v)) for k, v in (metrics or {}).items()) if x is not None}
        if values:
            self._apply(self._observe(state.global_step, values, mode="eval"), control, kwargs)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        return control

    def _apply(self, queue, control, kwargs, can_skip=False):
        for firing, name, fargs in self._trainer_actions(queue):
            if name == "stop":
                control.should_training_stop = True
                self.log.warning("vigil: step %d: %s -> stop (%s)", firing.step, firing.rule,
                                 fargs.get("reason", ""))
            elif name == "checkpoint":
                control.should_save = True
            elif name == "reduce_lr":
                opt = kwargs.get("optimizer")
                if opt is None:
                    self._error(f"reduce_lr ({firing.rule}): the trainer passed no optimizer")
                    continue
                self._reduce_lr([opt], [kwargs.get("lr_scheduler")], fargs)
            elif name == "skip_step":
                if not can_skip:
                    self._error(f"skip_step ({firing.rule}, step {firing.step}): fired after the "
                                f"optimizer step; only rules on tensor series can skip it")
                    continue
                _drop_grads([kwargs.get("optimizer")], kwargs.get("model"))


def _drop_grads(optimizers, model=None):
    # torch optimizers skip parameters whose .grad is None: no update and no
    # change to their moments, i.e. the step is skipped.
    for opt in optimizers:
        if opt is None:
            continue
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = None
    if model is not None:
        for p in model.parameters():
            p.grad = None


def _lightning_base():
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return __import__(module, fromlist=["Callback"]).Callback
        except ImportError:
            continue

    class CallbackShape:
        """The hooks of lightning.pytorch.Callback (2.4) that vigil uses."""

    return CallbackShape


class LightningCallback(_Rules, _lightning_base()):
    """A Lightning `Callback` that runs Vigil rules.

    Observes, at step = the optimizer step (trainer.global_step after it):
      on_before_optimizer_step: grad/weight tensor series (only those rules
        read), at global_step + 1;
      on_train_batch_end: `loss` (from outputs), `lr` (first optimizer's first
        group) and the numeric trainer.callback_metrics not named val*/eval*;
      on_validation_end: the numeric trainer.callback_metrics named val*/eval*,
        mode "eval".
    The rules' state is the callback's state_dict, saved in Lightning's checkpoints.
    """

    def __init__(self, rules=None, *, params=None, engine=None, logger=None,
                 checkpoint_dir: Optional[str] = None, watch_grads=True, watch_weights=True):
        _Rules.__init__(self, rules, params, engine, logger, watch_grads, watch_weights)
        self.checkpoint_dir = checkpoint_dir

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        tensors = self._tensors(pl_module)
        if tensors:
            queue = self._observe(trainer.global_step + 1, {}, tensors=tensors)
            self._apply(queue, trainer, can_skip=True, optimizer=optimizer, model=pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        values = {}
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        x = _number(loss) if loss is not None else None
        if x is not None:
            values["loss"] = x
        if trainer.optimizers and trainer.optimizers[0].param_groups:
            values["lr"] = float(trainer.optimizers[0].param_groups[0]["lr"])
        for k, v in getattr(trainer, "callback_metrics", {}).items():
            if _is_eval_key(k) or k in values:
                continue
            x = _number(v)
            if x is not None:
                values[k] = x
        self._apply(self._observe(trainer.global_step, values), trainer)

    def on_validation_end(self, trainer, pl_module):
        if getattr(trainer, "sanity_checking", False):
            return
        values = {}
        for k, v in getattr(trainer, "callback_metrics", {}).items():
            x = _number(v) if _is_eval_key(k) else None
            if x is not None:
                values[k] = x
        if values:
            self._apply(self._observe(trainer.global_step, values, mode="eval"), trainer)

    def _apply(self, queue, trainer, can_skip=False, optimizer=None, model=None):
        for firing, name, fargs in self._trainer_actions(queue):
            if name == "stop":
                trainer.should_stop = True
                self.log.warning("vigil: step %d: %s -> stop (%s)", firing.step, firing.rule,
                                 fargs.get("reason", ""))
            elif name == "checkpoint":
                if not self.checkpoint_dir:
                    self._error(f"checkpoint ({firing.rule}): no checkpoint_dir given")
                    continue
                os.makedirs(self.checkpoint_dir, exist_ok=True)
                trainer.save_checkpoint(os.path.join(self.checkpoint_dir, f"vigil-step={firing.step}.ckpt"))
            elif name == "reduce_lr":
                schedulers = [getattr(c, "scheduler", None) for c in getattr(trainer, "lr_scheduler_configs", [])]
                self._reduce_lr(trainer.optimizers, schedulers, fargs)
            elif name == "skip_step":
                if not can_skip:
                    self._error(f"skip_step ({firing.rule}, step {firing.step}): fired after the "
                                f"optimizer step; only rules on tensor series can skip it")
                    continue
                _drop_grads([optimizer], model)

    # Lightning's hook names for the callback state (Lightning >= 1.5 also
    # calls state_dict / load_state_dict, which _Rules provides).
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        pass

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        pass
