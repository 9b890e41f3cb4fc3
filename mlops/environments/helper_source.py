"""The runtime's helpers (readonly_inputs, azureml_run, the mini-batch worker, ...) as the job's
own Python reads them. They are written for 3.7 and newer (`from __future__ import annotations`
keeps their `X | None` annotations unevaluated); Python 3.6 has neither that future import nor
`X | None`, so for it each helper is copied with its annotations taken out, which changes nothing
it does. An environment that asks for `python=3.6.2` then runs on a 3.6 interpreter, as Azure's
image runs it, instead of having its packages moved to another Python.
"""

from __future__ import annotations

import ast

ANNOTATIONS_FROM = (3, 7)  # the first Python with `from __future__ import annotations`


class _Unannotated(ast.NodeTransformer):
    """Annotations out of signatures and assignments; the annotations future import out."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        if node.module == "__future__":
            kept = [alias for alias in node.names if alias.name != "annotations"]
            if not kept:
                return None
            node.names = kept
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:  # `name: type` alone declares nothing at run time
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def for_python(source: str, info: tuple[int, int]) -> str:
    """`source` as Python `info` (major, minor) reads it: unchanged from 3.7, unannotated
    before."""
    if info >= ANNOTATIONS_FROM:
        return source
    tree = _Unannotated().visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"
