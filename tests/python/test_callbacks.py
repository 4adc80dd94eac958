"""vigil.callbacks: the Hugging Face- and Lightning-shaped callbacks, driven by
minimal trainer loops that call the hooks in the documented order with the
documented arguments (transformers 4.44 Trainer._inner_training_loop and
CallbackHandler; Lightning 2.4 automatic optimization)."""
import logging
import math
from types import SimpleNamespace

import pytest
import torch

from vigil.callbacks import HFCallback, LightningCallback

torch.set_num_threads(1)

RULES = """
rule nan_grad: when not is_finite(grad_norm) do skip_step
rule high_loss: when loss > 50 do checkpoint, reduce_lr(factor = 0.5)
rule overfit "eval loss too high":
    when eval_loss > 3
    in eval
    do stop("overfit")
rule back: when loss < 0 do rollback
"""


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))


def _batch(step, nan_steps):
    x = torch.randn(8, 3)
    if step in nan_steps:
        x[0, 0] = float("nan")
    return x


def run_hf(cb, steps, nan_steps=(), loss_override=None, eval_losses=None, eval_every=5):
    """transformers 4.44's loop, reduced to the callback calls and their arguments."""
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    args = SimpleNamespace(logging_steps=1, eval_steps=eval_every, output_dir="unused")
    state = SimpleNamespace(global_step=0, epoch=0.0, log_history=[])
    control = SimpleNamespace(should_training_stop=False, should_save=False, should_evaluate=False,
                              should_log=False, should_epoch_stop=False)
    kw = dict(model=model, tokenizer=None, optimizer=optimizer, lr_scheduler=scheduler,
              train_dataloader=None, eval_dataloader=None)
    log = SimpleNamespace(saves=[], params_before={}, skipped=[])
    control = cb.on_init_end(args, state, control) or control
    control = cb.on_train_begin(args, state, control, **kw) or control
    control = cb.on_epoch_begin(args, state, control, **kw) or control
    for step in range(1, steps + 1):
        control = cb.on_step_begin(args, state, control, **kw) or control
        loss = model(_batch(step, nan_steps)).pow(2).mean()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item()
        before = [p.detach().clone() for p in model.parameters()]
        control = cb.on_pre_optimizer_step(args, state, control, **kw) or control
        optimizer.step()
        control = cb.on_optimizer_step(args, state, control, **kw) or control
        if all(torch.equal(a, b) for a, b in zip(before, model.parameters())):
            log.skipped.append(step)
        scheduler.step()
        model.zero_grad()
        state.global_step += 1
        state.epoch = step / steps
        control = cb.on_step_end(args, state, control, **kw) or control
        value = loss.item() if loss_override is None else loss_override.get(step, loss.item())
        logs = {"loss": value, "grad_norm": grad_norm, "learning_rate": scheduler.get_last_lr()[0],
                "epoch": state.epoch}
        state.log_history.append(logs)
        control = cb.on_log(args, state, control, logs=logs, **kw) or control
        if step % eval_every == 0 and eval_losses:
            metrics = {"eval_loss": eval_losses[step // eval_every - 1], "epoch": state.epoch}
            control = cb.on_log(args, state, control, logs=metrics, **kw) or control
            control = cb.on_evaluate(args, state, control, metrics=metrics, **kw) or control
        if control.should_save:
            log.saves.append(step)
            control = cb.on_save(args, state, control, **kw) or control
            control.should_save = False
        if control.should_training_stop:
            break
    control = cb.on_epoch_end(args, state, control, **kw) or control
    control = cb.on_train_end(args, state, control, **kw) or control
    return SimpleNamespace(state=state, control=control, optimizer=optimizer, scheduler=scheduler,
                           model=model, log=log)


def test_hf_skip_step_on_nan_gradients_keeps_the_model_finite(tmp_path):
    r = run_hf(HFCallback(engine=None, rules=_rules(tmp_path)), steps=10, nan_steps={4})
    assert r.log.skipped == [4]
    assert all(torch.isfinite(p).all() for p in r.model.parameters())
    # Adam took 9 steps: the skipped one changed no moment.
    assert {s["step"].item() if torch.is_tensor(s["step"]) else s["step"]
            for s in r.optimizer.state.values()} == {9}


def test_hf_without_rules_the_nan_batch_ruins_the_model(tmp_path):
    class Nothing(HFCallback):
        pass
    r = run_hf(Nothing(rules=_rules(tmp_path, "rule x: when loss > 1e30 do log\n")), steps=10, nan_steps={4})
    assert not all(torch.isfinite(p).all() for p in r.model.parameters())


def _rules(tmp_path, text=RULES):
    path = tmp_path / "train.rules"
    path.write_text(text)
    return str(path)


def test_hf_stop_save_reduce_lr_and_unsupported_actions(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="vigil")
    cb = HFCallback(_rules(tmp_path))
    r = run_hf(cb, steps=30, loss_override={3: 100.0, 7: -1.0}, eval_losses=[1.0, 2.0, 4.0, 1.0])
    assert r.log.saves == [3]
    assert r.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)
    assert r.scheduler.base_lrs == [pytest.approx(0.005)]
    assert r.state.global_step == 15 and r.control.should_training_stop
    assert [(f.rule, f.step, f.mode) for f in cb.firings] == [
        ("high_loss", 3, "train"), ("back", 7, "train"), ("overfit", 15, "eval")]
    assert len(cb.errors) == 1 and cb.errors[0].startswith("rollback (back, step 7)")
    assert "-> stop (overfit)" in caplog.text


def test_hf_rule_state_round_trips_through_state_dict(tmp_path):
    text = "rule slow: when loss > 1 for 3 samples do log\n"
    a = HFCallback(_rules(tmp_path, text))
    run_hf(a, steps=2, loss_override={1: 5.0, 2: 5.0})
    b = HFCallback(_rules(tmp_path, text))
    b.load_state_dict(a.state_dict())
    state = SimpleNamespace(global_step=3)
    control = SimpleNamespace(should_training_stop=False, should_save=False)
    b.on_log(None, state, control, logs={"loss": 5.0})
    assert [(f.rule, f.step) for f in b.firings] == [("slow", 3)]


def run_lightning(cb, steps, nan_steps=(), loss_override=None, val_losses=None, val_every=5):
    """Lightning 2.4's automatic optimization, reduced to the callback calls."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    saved = []
    trainer = SimpleNamespace(global_step=0, optimizers=[optimizer], lr_scheduler_configs=[],
                              callback_metrics={}, should_stop=False, sanity_checking=False,
                              save_checkpoint=lambda path: saved.append(path))
    skipped = []
    for batch_idx in range(steps):
        step = batch_idx + 1
        batch = _batch(step, nan_steps)
        cb.on_train_batch_start(trainer, model, batch, batch_idx) if hasattr(cb, "on_train_batch_start") else None
        loss = model(batch).pow(2).mean()  # training_step
        optimizer.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in model.parameters()]
        cb.on_before_optimizer_step(trainer, model, optimizer)
        optimizer.step()
        if all(torch.equal(a, b) for a, b in zip(before, model.parameters())):
            skipped.append(step)
        trainer.global_step += 1
        value = loss.detach() if loss_override is None or step not in loss_override \
            else torch.tensor(loss_override[step])
        trainer.callback_metrics = {"train_loss": value}
        cb.on_train_batch_end(trainer, model, {"loss": value}, batch, batch_idx)
        if step % val_every == 0 and val_losses:
            trainer.callback_metrics = {"train_loss": value,
                                        "eval_loss": torch.tensor(val_losses[step // val_every - 1])}
            cb.on_validation_end(trainer, model)
        if trainer.should_stop:
            break
    return SimpleNamespace(trainer=trainer, model=model, saved=saved, skipped=skipped, optimizer=optimizer)


def test_lightning_skip_stop_checkpoint_and_reduce_lr(tmp_path):
    cb = LightningCallback(_rules(tmp_path), checkpoint_dir=str(tmp_path / "ck"))
    r = run_lightning(cb, steps=30, nan_steps={6}, loss_override={3: 100.0},
                      val_losses=[1.0, 5.0, 1.0])
    assert r.skipped == [6]
    assert all(torch.isfinite(p).all() for p in r.model.parameters())
    assert r.saved == [str(tmp_path / "ck" / "vigil-step=3.ckpt")]
    assert r.optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert r.trainer.should_stop and r.trainer.global_step == 10
    rules = [(f.rule, f.step, f.mode) for f in cb.firings]
    assert ("overfit", 10, "eval") in rules and ("high_loss", 3, "train") in rules
    assert cb.state_dict()["vigil_engine"]
    # train_loss was observed at train time only, eval_loss at validation only.
    assert cb.firings[-1].mode == "eval"


def test_lightning_observes_train_and_validation_metrics_apart(tmp_path):
    cb = LightningCallback(engine=None, rules=_rules(tmp_path, "rule x: when loss > 1e30 do log\n"))
    seen = []
    cb.engine.record(seen.append)
    run_lightning(cb, steps=5, val_losses=[0.7])
    train = [o for o in seen if o["mode"] == "train"]
    evals = [o for o in seen if o["mode"] == "eval"]
    assert all(set(o["values"]) >= {"loss", "lr", "train_loss"} and "eval_loss" not in o["values"] for o in train)
    assert [(o["step"], o["values"]) for o in evals] == [(5, {"eval_loss": pytest.approx(0.7)})]


def test_lightning_checkpoint_without_dir_is_an_error_not_a_crash(tmp_path):
    cb = LightningCallback(_rules(tmp_path))
    run_lightning(cb, steps=4, loss_override={2: 100.0})
    assert cb.errors == ["checkpoint (high_loss): no checkpoint_dir given"]
    assert not math.isnan(cb.firings[0].value)
