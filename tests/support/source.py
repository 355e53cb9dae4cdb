"""The package's source, parsed and walked once per test process: several unit tests walk
every module of scrapy_scale (the import graph, stats keys, meta keys, the outcome's
readers), and parsing and walking the whole package took each of them about half a second."""

from __future__ import annotations

import ast
import functools


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, cached by the source alone (the name only goes into
    a syntax error): the tree is shared, so read it, never change it."""
    try:
        return _parse(source)
    except SyntaxError:
        return ast.parse(source, filename)  # raises again, naming the file


@functools.cache
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


_walked: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}


def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """``tuple(ast.walk(node))``, kept (with ``node`` itself, so its id is never reused)."""
    hit = _walked.get(id(node))
    if hit is None or hit[0] is not node:
        hit = _walked[id(node)] = (node, tuple(ast.walk(node)))
    return hit[1]
