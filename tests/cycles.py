"""A two-object reference cycle: garbage that only the cyclic collector frees."""

from __future__ import annotations


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> Node:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a
