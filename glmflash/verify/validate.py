"""Stage 1 of the verifier: decide from the syntax tree alone whether a candidate may run.

A candidate is exactly one top-level `def <entry_point>(a, b, ...)` built from an allow-list
of node types and builtin names. What is left out, and why:
  attributes (`x.__class__`, `f.__globals__`): the road to every object in the interpreter;
  any name starting with '__': dunders and name-mangled privates;
  import, global/nonlocal, class, lambda, nested def: no module objects, no other scopes;
  try/except/raise, with, assert: a candidate may not catch or raise control-flow exceptions;
  yield/await/async, `*args`/`**kwargs`, starred expressions, walrus, match: not needed by a
  pure function of its arguments, and each widens what must be reasoned about.
Every name read must be a parameter, a name the function assigns, the function itself
(recursion) or an allowed builtin. Size (characters, nodes) and nesting depth are capped, and
whatever ast.parse or compile raise on hostile input is turned into a reason, never an error.
"""

from __future__ import annotations

import ast
import warnings

MAX_CHARS = 4000
MAX_NODES = 1500
MAX_DEPTH = 40

ALLOWED_BUILTINS = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "chr",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "int",
        "isinstance",
        "len",
        "list",
        "map",
        "max",
        "min",
        "ord",
        "pow",
        "range",
        "reversed",
        "round",
        "set",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
    }
)

ALLOWED_NODES = frozenset(
    {
        # statements (FunctionDef only as the single top-level statement)
        ast.Module,
        ast.FunctionDef,
        ast.arguments,
        ast.arg,
        ast.Return,
        ast.Assign,
        ast.AugAssign,
        ast.If,
        ast.For,
        ast.While,
        ast.Break,
        ast.Continue,
        ast.Pass,
        ast.Expr,
        ast.Delete,
        # expressions
        ast.BoolOp,
        ast.BinOp,
        ast.UnaryOp,
        ast.IfExp,
        ast.Compare,
        ast.Call,
        ast.keyword,
        ast.Name,
        ast.Constant,
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
        ast.Subscript,
        ast.Slice,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
        ast.comprehension,
        ast.JoinedStr,
        ast.FormattedValue,
        ast.Load,
        ast.Store,
        ast.Del,
        # operators
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.Div,
        ast.FloorDiv,
        ast.Mod,
        ast.Pow,
        ast.LShift,
        ast.RShift,
        ast.BitOr,
        ast.BitXor,
        ast.BitAnd,
        ast.UAdd,
        ast.USub,
        ast.Not,
        ast.Invert,
        ast.And,
        ast.Or,
        ast.Eq,
        ast.NotEq,
        ast.Lt,
        ast.LtE,
        ast.Gt,
        ast.GtE,
        ast.Is,
        ast.IsNot,
        ast.In,
        ast.NotIn,
    }
)

CONSTANT_TYPES = (int, float, str, bool, type(None))


def _signature_problem(func: ast.FunctionDef, n_args: int | None) -> str | None:
    a = func.args
    if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults:
        return "only plain positional parameters are allowed"
    if func.decorator_list or func.returns or getattr(func, "type_params", None):
        return "decorators, annotations and type parameters are not allowed"
    if any(arg.annotation is not None for arg in a.args):
        return "parameter annotations are not allowed"
    if n_args is not None and len(a.args) != n_args:
        return f"{func.name} takes {len(a.args)} parameters, the cases pass {n_args}"
    return None


def _node_problem(node: ast.AST, func: ast.FunctionDef) -> str | None:
    if type(node) not in ALLOWED_NODES or (isinstance(node, ast.FunctionDef) and node is not func):
        return f"{type(node).__name__} is not allowed"
    if isinstance(node, ast.Constant) and type(node.value) not in CONSTANT_TYPES:
        return f"constant of type {type(node.value).__name__} is not allowed"
    if isinstance(node, ast.keyword) and node.arg is None:
        return "**keyword unpacking is not allowed"
    if isinstance(node, ast.comprehension) and node.is_async:
        return "async comprehensions are not allowed"
    name = (
        node.id
        if isinstance(node, ast.Name)
        else node.arg
        if isinstance(node, (ast.arg, ast.keyword))
        else None
    )
    if name is not None and name.startswith("__"):
        return f"name {name!r} is not allowed"
    return None


def validate(
    source: str,
    entry_point: str,
    n_args: int | None = None,
    *,
    max_chars: int = MAX_CHARS,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
) -> str | None:
    """Return why `source` may not run as `entry_point`, or None when it may.

    n_args, when given, is the number of arguments every case passes.
    """
    if not isinstance(source, str):
        return "source is not a string"
    if len(source) > max_chars:
        return f"source longer than {max_chars} characters"
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences: the candidate's own
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        return f"does not parse: {type(err).__name__}"
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return "source must be exactly one function definition"
    func = tree.body[0]
    if func.name != entry_point:
        return f"defines {func.name!r}, expected {entry_point!r}"
    if entry_point.startswith("__"):
        return f"name {entry_point!r} is not allowed"
    problem = _signature_problem(func, n_args)
    if problem:
        return problem
    stack, n_nodes, loaded, bound = [(tree, 0)], 0, set(), {entry_point}
    bound.update(arg.arg for arg in func.args.args)
    while stack:  # iterative walk: the depth cap is checked before anything recurses
        node, depth = stack.pop()
        n_nodes += 1
        if n_nodes > max_nodes:
            return f"more than {max_nodes} syntax nodes"
        if depth > max_depth:
            return f"nested deeper than {max_depth}"
        problem = _node_problem(node, func)
        if problem:
            return problem
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    unknown = sorted(loaded - bound - ALLOWED_BUILTINS)
    if unknown:
        return f"name {unknown[0]!r} is not allowed"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(tree, "<candidate>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        return f"does not compile: {type(err).__name__}"
    return None
