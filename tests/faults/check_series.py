#!/usr/bin/python3
"""faults.series_vocabulary: docs/series.md, the adapters and the standard
library agree (see docs/series.md for the three properties checked).

    PYTHONPATH=build/python /usr/bin/python3 tests/faults/check_series.py SOURCE_DIR RULECHECK
"""

import os
import re
import subprocess
import sys

import torch

import vigil
import vigil.torch as vt

source, rulecheck = sys.argv[1], sys.argv[2]
errors = []


def base(key):
    """The series name of a key, without labels."""
    return key.split("{", 1)[0]


# -- the table ---------------------------------------------------------------
doc = open(os.path.join(source, "docs/series.md"), encoding="utf-8").read()
source_of = {}    # Vigil name -> adapter / host / informational
read_by_doc = {}  # Vigil name -> the templates the table says read it
for line in doc.splitlines():
    if not line.startswith("| `"):
        continue
    cells = [c.strip() for c in line.strip("|").split("|")]
    names = [base(n) for n in re.findall(r"`([^`]+)`", cells[0])]
    if cells[2] in ("adapter", "adapter (per layer)", "host", "informational"):
        src, readers = cells[2].split()[0], cells[3]
    else:  # the tensor statistics table: adapter-produced when read
        src, readers = "adapter", cells[1]
    for n in names:
        source_of[n] = src
        read_by_doc[n] = {r.strip() for r in readers.split(",") if r.strip() and r.strip() != "—"}
if not source_of:
    errors.append("docs/series.md: no table rows found")

# -- what the standard templates read at their defaults ---------------------
names = [l.split()[0] for l in subprocess.run([rulecheck, "stdlib"], capture_output=True, text=True,
                                                check=True).stdout.splitlines() if l.strip()]
all_rules = "\n".join(f"use std.{n}()" for n in names)
program = vigil.compile(all_rules, name="all-stdlib")
reads = {}  # series -> templates
for r in program.rules:
    for s in r["reads"]:
        reads.setdefault(base(s), set()).add(r["template"])
for series, templates in sorted(reads.items()):
    if series not in source_of:
        errors.append(f"stdlib reads '{series}' ({', '.join(sorted(templates))}): not in docs/series.md")
        continue
    missing = templates - read_by_doc[series]
    if missing:
        errors.append(f"docs/series.md: '{series}' is also read by {', '.join(sorted(missing))}")

# -- what the Python Monitor records by default ---------------------------
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
mon = vt.Monitor(model, opt, rules=program)
mon.activation("relu", model[1])
recorded = set()
mon.record(lambda obs: recorded.update(base(k) for k in obs["values"]))
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for step in range(1, 4):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    mon.after_backward(step, loss)
    opt.step()
    mon.after_step(step)
if not recorded:
    errors.append("the Monitor recorded nothing")
for series in sorted(recorded):
    if series not in source_of:
        errors.append(f"the Monitor records '{series}': not in docs/series.md")
    elif series not in reads and source_of[series] != "informational":
        errors.append(f"the Monitor records '{series}': read by no standard template and not "
                      "marked informational")
    elif source_of[series] != "adapter" and source_of[series] != "informational":
        errors.append(f"docs/series.md: '{series}' is recorded by the adapter, not '{source_of[series]}'")
for series in sorted(reads):
    if source_of.get(series) == "adapter" and series not in recorded:
        errors.append(f"docs/series.md marks '{series}' adapter, but the Monitor did not record it")

# Each detector of a training fault works on what the adapter records alone.
adapter_only = {"terminate_on_nan", "loss_spike", "grad_norm_spike", "divergence", "throughput_drop",
                "lr_collapse", "vanishing_gradient", "exploding_tensor", "dead_relu",
                "stalled_training", "loss_not_decreasing"}
for r in program.rules:
    if r["template"] in adapter_only and not any(base(s) in recorded for s in r["reads"]):
        errors.append(f"{r['template']} reads {r['reads']}: none of them is recorded by the adapter")

# -- the C++ adapter registers the same scalars ---------------------------
cpp = open(os.path.join(source, "torch/monitor.cpp"), encoding="utf-8").read()
cpp_scalars = set(re.findall(r'engine\.series\("([a-z_]+)"\)', cpp))
py_scalars = {s for s in recorded if not s.startswith(("grad_", "weight_", "activation_"))}
# `cost` is recorded only when the host gives `param price_per_hour` (docs/spot.md).
py_scalars |= {"cost"}
if cpp_scalars != py_scalars:
    errors.append(f"C++ adapter scalars {sorted(cpp_scalars)} != Python Monitor's {sorted(py_scalars)}")

# -- every alias block of the page compiles ---------------------------------
block = re.search(r"## Aliases.*?```rules\n(.*?)```", doc, re.S)
if not block:
    errors.append("docs/series.md: no alias block")
else:
    for part in block.group(1).split("\n\n"):
        try:
            vigil.compile(part + "\nwhen loss > 0 do log\n", name="series.md")
        except vigil.CompileError as e:
            errors.append(f"docs/series.md alias lines do not compile:\n{e}")

for e in errors:
    print("error:", e)
print(f"{len(reads)} series read by {len(names)} templates, {len(recorded)} recorded by the Monitor, "
      f"{len(errors)} errors")
sys.exit(1 if errors else 0)
