#!/usr/bin/python3
"""Convert a wide training-log CSV into a Vigil JSONL trace (SPEC section 6).

The input has one step column and one column per series; an empty cell means
"no sample at this step". Every row becomes one "train" observation holding
its non-empty cells. Columns named with --eval (e.g. val_loss) are written as
a separate "eval" observation at the same step, after the train one, because
that is how an evaluation pass looks to a host that feeds Vigil online.

Values are copied, never invented: a cell is parsed as a float and written in
the shortest form that reads back to the same double; non-finite cells become
the strings "NaN", "Infinity", "-Infinity" as the trace format requires.

Usage (this is how demo.jsonl was made):

    /usr/bin/python3 examples/traces/convert_csv.py \\
        /path/to/llmc_gpt2_124m_baseline.csv examples/traces/demo.jsonl \\
        --from 6000 --to 9500 --eval val_loss

Standard library only.
"""

import argparse
import csv
import json
import math
import sys


def json_value(cell):
    """A CSV cell as a JSON-ready value (float, or a string for non-finite)."""
    value = float(cell)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def observation(step, mode, values):
    # Key order is fixed so the output is stable and diffs stay readable.
    return json.dumps({"step": step, "mode": mode, "values": values}, separators=(", ", ": "))


def convert(reader, out, step_column, eval_columns, first, last):
    written = 0
    for line_no, row in enumerate(reader, start=2):
        try:
            step = int(row[step_column])
        except (KeyError, ValueError):
            raise SystemExit(f"line {line_no}: no integer in column '{step_column}'")
        if (first is not None and step < first) or (last is not None and step > last):
            continue
        train, evals = {}, {}
        for column, cell in row.items():
            if column == step_column or cell is None or cell.strip() == "":
                continue
            try:
                value = json_value(cell)
            except ValueError:
                raise SystemExit(f"line {line_no}: column '{column}': not a number: {cell!r}")
            (evals if column in eval_columns else train)[column] = value
        if train:
            out.write(observation(step, "train", train) + "\n")
            written += 1
        if evals:
            out.write(observation(step, "eval", evals) + "\n")
            written += 1
    return written


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="wide CSV input")
    parser.add_argument("jsonl", help="Vigil JSONL output ('-' for stdout)")
    parser.add_argument("--step-column", default="step")
    parser.add_argument("--eval", action="append", default=[], metavar="COLUMN",
                        help="column written as an eval-mode observation (repeatable)")
    parser.add_argument("--from", dest="first", type=int, help="first step to keep")
    parser.add_argument("--to", dest="last", type=int, help="last step to keep")
    args = parser.parse_args(argv)

    with open(args.csv, newline="") as f:
        reader = csv.DictReader(f)
        if args.step_column not in (reader.fieldnames or []):
            raise SystemExit(f"{args.csv}: no '{args.step_column}' column")
        missing = [c for c in args.eval if c not in reader.fieldnames]
        if missing:
            raise SystemExit(f"{args.csv}: no column {missing[0]!r}")
        out = sys.stdout if args.jsonl == "-" else open(args.jsonl, "w", newline="\n")
        try:
            n = convert(reader, out, args.step_column, set(args.eval), args.first, args.last)
        finally:
            if out is not sys.stdout:
                out.close()
    print(f"wrote {n} observations", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
