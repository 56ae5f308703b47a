"""A small SQL tokenizer with positions, shared by the DDL and type parsers.

It knows just enough SQL lexing to be safe: quoted strings ('..' with '' escapes),
backticked and double-quoted identifiers, line and block comments, numbers and
punctuation. Every token remembers its offset and line so errors point at the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from runner.core.errors import UserError


class Kind(Enum):
    WORD = "word"  # bare identifier or keyword
    QUOTED_IDENT = "quoted identifier"  # `x` or "x"
    STRING = "string"  # 'x'
    NUMBER = "number"
    PUNCT = "punctuation"
    EOF = "end of input"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str  # the value: identifier/string content without quotes, or the raw text
    start: int  # offset of the first character in the source
    end: int  # offset just past the last character
    line: int

    def is_word(self, *words: str) -> bool:
        return self.kind is Kind.WORD and self.text.upper() in words

    def is_punct(self, *chars: str) -> bool:
        return self.kind is Kind.PUNCT and self.text in chars

    @property
    def is_identifier(self) -> bool:
        return self.kind in (Kind.WORD, Kind.QUOTED_IDENT)

    def describe(self) -> str:
        if self.kind is Kind.EOF:
            return "end of input"
        return repr(self.text) if self.kind is not Kind.STRING else f"string '{self.text}'"


_PUNCT2 = ("<=", ">=", "<>", "!=", "::", "||")
_PUNCT1 = "(),;.<>=+-*/%:[]{}!|&^~?"


def tokenize(source: str, *, file: str | None = None, first_line: int = 1) -> list[Token]:
    """Split SQL text into tokens (comments and whitespace dropped), ending with an EOF token."""
    tokens: list[Token] = []
    i = 0
    line = first_line
    n = len(source)

    def error(message: str, at_line: int) -> UserError:
        return UserError.of("SQL_LEXICAL_ERROR", file=file, line=at_line, reason=message)

    while i < n:
        c = source[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif source.startswith("--", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            if j < 0:
                raise error("unterminated /* comment", line)
            line += source.count("\n", i, j)
            i = j + 2
        elif c in "'`\"":
            kind = Kind.STRING if c == "'" else Kind.QUOTED_IDENT
            what = "string literal" if c == "'" else f"{c}quoted identifier"
            text, end = _quoted(source, i, c, backslash_escapes=c == "'")
            if end < 0:
                raise error(f"unterminated {what}", line)
            tokens.append(Token(kind, text, i, end, line))
            line += source.count("\n", i, end)
            i = end
        elif c.isdigit():
            j = i
            while j < n and (source[j].isdigit() or source[j] == "."):
                j += 1
            tokens.append(Token(Kind.NUMBER, source[i:j], i, j, line))
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (source[j].isalnum() or source[j] in "_$"):
                j += 1
            tokens.append(Token(Kind.WORD, source[i:j], i, j, line))
            i = j
        elif source[i : i + 2] in _PUNCT2:
            tokens.append(Token(Kind.PUNCT, source[i : i + 2], i, i + 2, line))
            i += 2
        elif c in _PUNCT1:
            tokens.append(Token(Kind.PUNCT, c, i, i + 1, line))
            i += 1
        else:
            raise error(f"unexpected character {c!r}", line)
    tokens.append(Token(Kind.EOF, "", n, n, line))
    return tokens


def _quoted(source: str, start: int, quote: str, *, backslash_escapes: bool) -> tuple[str, int]:
    """Content of the quoted token at ``start`` and the offset past it (-1 when unterminated).

    A doubled quote stands for itself; in strings a backslash escapes the next character.
    """
    buf: list[str] = []
    i, n = start + 1, len(source)
    while i < n:
        ch = source[i]
        if ch == quote and i + 1 < n and source[i + 1] == quote:
            buf.append(quote)
            i += 2
        elif ch == quote:
            return "".join(buf), i + 1
        elif backslash_escapes and ch == "\\" and i + 1 < n:
            buf.append(source[i + 1])
            i += 2
        else:
            buf.append(ch)
            i += 1
    return "".join(buf), -1


class TokenStream:
    """Cursor over tokens with helpers that raise located, specific errors."""

    def __init__(self, tokens: list[Token], *, file: str | None, code: str):
        self.tokens = tokens
        self.pos = 0
        self.file = file
        self.code = code  # error code used for "expected X, found Y": its template takes reason and hint

    @property
    def peek(self) -> Token:
        return self.tokens[self.pos]

    def peek_at(self, offset: int) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind is not Kind.EOF:
            self.pos += 1
        return tok

    def error(self, message: str, token: Token | None = None, hint: str | None = None) -> UserError:
        tok = token or self.peek
        return UserError.of(self.code, file=self.file, line=tok.line, reason=message, hint=hint or "")

    def expect_word(self, *words: str) -> Token:
        tok = self.peek
        if not tok.is_word(*words):
            raise self.error(f"expected {' or '.join(words)}, found {tok.describe()}")
        return self.next()

    def expect_punct(self, char: str) -> Token:
        tok = self.peek
        if not tok.is_punct(char):
            raise self.error(f"expected '{char}', found {tok.describe()}")
        return self.next()

    def expect_identifier(self, what: str) -> Token:
        tok = self.peek
        if not tok.is_identifier:
            raise self.error(f"expected {what}, found {tok.describe()}")
        return self.next()

    def expect_string(self, what: str) -> Token:
        tok = self.peek
        if tok.kind is not Kind.STRING:
            raise self.error(f"expected {what} as a quoted string, found {tok.describe()}")
        return self.next()

    def accept_word(self, *words: str) -> Token | None:
        return self.next() if self.peek.is_word(*words) else None

    def accept_punct(self, char: str) -> Token | None:
        return self.next() if self.peek.is_punct(char) else None


def split_statements(source: str, *, file: str | None = None) -> list[tuple[str, int]]:
    """Split on top-level ';' and return (statement text, first line) for non-empty statements."""
    tokens = tokenize(source, file=file)
    statements: list[tuple[str, int]] = []
    start_tok = 0
    for idx, tok in enumerate(tokens):
        if tok.is_punct(";") or tok.kind is Kind.EOF:
            body = tokens[start_tok:idx]
            if body:
                statements.append((source[body[0].start : body[-1].end], body[0].line))
            start_tok = idx + 1
    return statements
