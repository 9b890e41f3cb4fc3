"""Shell words: a RUN line's simple commands split as a shell splits them, and the Dockerfile
variables (ARG, ENV) a line sees substituted as the shell would see them."""

from __future__ import annotations

import re
import shlex

SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
REDIRECTION = re.compile(r"^[<>]+&?$|^&>+$")
VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def substituted(text: str, variables: dict[str, str]) -> str:
    """`$NAME`, `${NAME}` and `${NAME:-default}` replaced by the ARG or ENV value the line sees
    (the shell that runs it sees them as variables), else the default; others kept as written,
    and what a shell keeps as written too: inside single quotes, after a backslash."""

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        return match.group(2) if match.group(2) is not None else match.group(0)

    return "".join(part if literal else VARIABLE.sub(value, part)
                   for part, literal in quoted_parts(text))


def quoted_parts(text: str) -> list[tuple[str, bool]]:
    """The text in runs, each marked literal (single-quoted outside double quotes, or a
    backslash and what it escapes) or not."""
    parts: list[tuple[str, bool]] = []
    start, index, double = 0, 0, False
    while index < len(text):
        char = text[index]
        if char == "\\" or (char == "'" and not double):
            end = index + 2 if char == "\\" else text.find("'", index + 1) + 1 or len(text)
            parts += [(text[start:index], False), (text[index:end], True)]
            start = index = end
            continue
        double ^= char == '"'
        index += 1
    return [*parts, (text[start:], False)]


def shell_commands(command: str) -> list[list[str]]:
    """The simple commands of a shell command line, each as its words, redirections left out."""
    tokens = []
    for line in command.replace("\\\n", " ").splitlines():  # a script's lines: commands
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens += [*lexer, ";"]
        except ValueError:  # an unbalanced quote: the words shlex can split
            tokens += [*line.split(), ";"]
    commands, words, skip = [], [], False
    for token in tokens:
        if skip:
            skip = False
        elif token in SEPARATORS:
            commands.append(words)
            words = []
        elif REDIRECTION.match(token):
            if words and words[-1].isdigit():
                words.pop()  # 2>/dev/null: the descriptor is not an argument
            skip = True  # its target (a file, a descriptor)
        else:
            words.append(token)
    return [words for words in [*commands, words] if words]
