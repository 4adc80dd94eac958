"""Vigil: declarative rules that watch a training run and act on it (SPEC §8).

    import vigil
    prog = vigil.compile('rule nan: when not is_finite(loss) do stop("nan loss")')
    eng = vigil.Engine(prog)
    eng.on("stop", lambda firing, action: print(firing.rule, action.args))
    fired = eng.observe(1, {"loss": float("nan")})

The engine is the C++ one (vigil._vigil); vigil.torch adapts it to PyTorch
training loops, vigil.callbacks to the Hugging Face and Lightning trainers.
See docs/python.md.
"""

from ._vigil import (  # noqa: F401
    Action,
    CompileError,
    Engine,
    Error,
    Firing,
    Program,
    Stats,
    compile,
    compile_file,
    series_key,
    to_jsonl,
)

__all__ = [
    "Action",
    "CompileError",
    "Engine",
    "Error",
    "Firing",
    "Program",
    "Stats",
    "compile",
    "compile_file",
    "series_key",
    "to_jsonl",
]
__version__ = "0.1.0"
