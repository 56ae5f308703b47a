"""Reading Java class files just far enough to check linkage: which members a class defines, which it calls.

A jar built against one version of a library and run against another fails only when a method or field
it uses is gone (``NoSuchMethodError`` at the first call, maybe days into a job). Checking every member
reference of a jar against the classes it will run with finds that before anything runs, as tools like
animal-sniffer do.
"""

from __future__ import annotations

import functools
import struct
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_REFERENCE_TAGS = {9: "field", 10: "method", 11: "method"}


@dataclass(frozen=True)
class ClassInfo:
    name: str  # internal form: org/apache/spark/sql/Dataset
    superclass: str | None
    interfaces: tuple[str, ...]
    members: frozenset[tuple[str, str]]  # (name, descriptor) of its fields and methods
    references: tuple[tuple[str, str, str], ...]  # (owner class, member name, descriptor) it uses


def parse(data: bytes) -> ClassInfo:
    """The parts of a class file linkage needs (JVM specification, chapter 4)."""
    count = struct.unpack(">H", data[8:10])[0]
    pool: list[tuple | None] = [None] * count
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:  # Utf8
            length = struct.unpack(">H", data[pos + 1 : pos + 3])[0]
            pool[index] = ("utf8", data[pos + 3 : pos + 3 + length].decode("utf-8", "replace"))
            pos += 3 + length
        elif tag == 7:  # Class
            pool[index] = ("class", struct.unpack(">H", data[pos + 1 : pos + 3])[0])
            pos += 3
        elif tag in _REFERENCE_TAGS:  # Fieldref, Methodref, InterfaceMethodref
            pool[index] = ("ref", *struct.unpack(">HH", data[pos + 1 : pos + 5]))
            pos += 5
        elif tag == 12:  # NameAndType
            pool[index] = ("nat", *struct.unpack(">HH", data[pos + 1 : pos + 5]))
            pos += 5
        elif tag in (5, 6):  # Long, Double: two entries
            pos += 9
            index += 1
        elif tag in (3, 4, 17, 18):  # Integer, Float, Dynamic, InvokeDynamic
            pos += 5
        elif tag in (8, 16, 19, 20):  # String, MethodType, Module, Package
            pos += 3
        elif tag == 15:  # MethodHandle
            pos += 4
        else:
            raise ValueError(f"unknown constant pool tag {tag}")
        index += 1

    def utf8(i: int) -> str:
        return pool[i][1]  # type: ignore[index]

    def class_name(i: int) -> str:
        return utf8(pool[i][1])  # type: ignore[index]

    _access, this, superclass, interface_count = struct.unpack(">HHHH", data[pos : pos + 8])
    pos += 8
    interfaces = tuple(
        class_name(struct.unpack(">H", data[pos + 2 * i : pos + 2 * i + 2])[0]) for i in range(interface_count)
    )
    pos += 2 * interface_count
    members = set()
    for _ in ("fields", "methods"):
        total = struct.unpack(">H", data[pos : pos + 2])[0]
        pos += 2
        for _ in range(total):
            _flags, name, descriptor, attributes = struct.unpack(">HHHH", data[pos : pos + 8])
            pos += 8
            for _ in range(attributes):
                pos += 6 + struct.unpack(">I", data[pos + 2 : pos + 6])[0]
            members.add((utf8(name), utf8(descriptor)))
    references = []
    for entry in pool:
        if entry is not None and entry[0] == "ref":
            nat = pool[entry[2]]
            references.append((class_name(entry[1]), utf8(nat[1]), utf8(nat[2])))  # type: ignore[index]
    return ClassInfo(
        class_name(this),
        class_name(superclass) if superclass else None,
        interfaces,
        frozenset(members),
        tuple(references),
    )


def classes_in(jar: Path) -> Iterator[tuple[str, bytes]]:
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if name.endswith(".class") and not name.startswith("META-INF/"):
                yield name[: -len(".class")], archive.read(name)


class Classpath:
    """Classes by internal name, read on demand from a list of jars (the first jar holding a class wins)."""

    def __init__(self, jars: Iterable[Path]):
        self.where: dict[str, zipfile.ZipFile] = {}
        for jar in jars:
            archive = zipfile.ZipFile(jar)  # kept open: classes are read from it on demand
            for name in archive.namelist():
                if name.endswith(".class") and not name.startswith("META-INF/"):
                    self.where.setdefault(name[: -len(".class")], archive)

    @functools.cache  # noqa: B019 - one classpath per test, kept for its life
    def get(self, name: str) -> ClassInfo | None:
        archive = self.where.get(name)
        return None if archive is None else parse(archive.read(f"{name}.class"))

    def defines(self, owner: str, member: str, descriptor: str) -> bool | None:
        """Whether ``owner`` or one of its supertypes defines the member: True, False, or None when that
        cannot be told here (the owner, or a supertype that might define it, is the JDK's)."""
        info = self.get(owner)
        if info is None:
            return None
        if (member, descriptor) in info.members:
            return True
        if member in ("<init>", "<clinit>"):  # a constructor is the class's own, never inherited
            return False
        unknown = False
        for parent in [info.superclass, *info.interfaces]:
            if parent is None:
                continue
            found = self.defines(parent, member, descriptor)
            if found:
                return True
            unknown = unknown or found is None
        return None if unknown else False
