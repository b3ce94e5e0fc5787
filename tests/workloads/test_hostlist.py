"""workloads/cifar10/hostlist: SLURM host lists, expanded as TensorFlow's resolver expands them.

The worker picks its peers from the host list before TensorFlow loads, and
TensorFlow builds the cluster spec from the same list with its own expander: for
every list of the form that expander reads (generated), both must give the same
names in the same order.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.cifar10.hostlist import HostlistError, expand

PREFIX = st.text(alphabet="abcgnopu-.", min_size=1, max_size=6).filter(
    lambda text: not text[-1].isdigit())


@st.composite
def ranges(draw: st.DrawFn) -> str:
    """``01-03`` or ``7``: a lower bound (its width pads), maybe an upper bound."""
    width = draw(st.integers(1, 3))
    low = draw(st.integers(0, 10 ** width - 1))
    text = str(low).zfill(width)
    if draw(st.booleans()):
        text += f"-{draw(st.integers(low, low + 12))}"
    return text


@st.composite
def tf_hostlists(draw: st.DrawFn) -> str:
    names = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(PREFIX)
        if draw(st.booleans()):
            name += "[" + ",".join(draw(st.lists(ranges(), min_size=1, max_size=3))) + "]"
        names.append(name)
    return ",".join(names)


@pytest.fixture(scope="module")
def tf_expand() -> Any:
    """TensorFlow's own ``expand_hostlist``, taken from its source file without importing
    TensorFlow (that costs seconds; the function needs only ``re``)."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("TensorFlow is not installed")
    source = (Path(spec.submodule_search_locations[0]) / "python" / "distribute"
              / "cluster_resolver" / "slurm_cluster_resolver.py")
    tree = ast.parse(source.read_text(), str(source))
    function = next(node for node in tree.body
                    if isinstance(node, ast.FunctionDef) and node.name == "expand_hostlist")
    namespace: dict[str, Any] = {"re": re}
    exec(compile(ast.Module([function], []), str(source), "exec"), namespace)
    return namespace["expand_hostlist"]


@given(tf_hostlists())
def test_the_names_are_the_ones_tensorflow_builds_the_spec_from(tf_expand: Any,
                                                                 hostlist: str) -> None:
    assert expand(hostlist) == tf_expand(hostlist)


@pytest.mark.parametrize(("hostlist", "names"), [
    ("gpu-node[01-02]", ["gpu-node01", "gpu-node02"]),
    ("localhost", ["localhost"]),
    ("n[8-10],login", ["n8", "n9", "n10", "login"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[1-2]-ib", ["n1-ib", "n2-ib"]),  # SLURM's suffixes, which TensorFlow cannot read
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_slurm_forms(hostlist: str, names: list[str]) -> None:
    assert expand(hostlist) == names


@pytest.mark.parametrize("hostlist", [
    "", "n[1-2", "n1-2]", "n[]", "n[2-1]", "n[x]", "n[1--2]", "a,,b", "n[[1]]", ",n1",
])
def test_what_is_not_a_host_list_is_refused(hostlist: str) -> None:
    with pytest.raises(HostlistError):
        expand(hostlist)
