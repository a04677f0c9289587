"""Filling in the sbatch template (sbatch_templates/train.sbatch) for a given training command.

The template marks two lines to edit, `TRAIN=(...)` and `#SBATCH --comment=...`; everything
else (the hold, the untyped GRES, requeue, append mode, the signal trap, exec) stays as shipped.
Demos and tests submit real template jobs through this, so a template whose marked lines moved
fails loudly instead of silently submitting something else.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

_TRAIN_LINE = re.compile(r"^TRAIN=\(.*\)$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^#SBATCH --comment=.*$", re.MULTILINE)


class TemplateError(ValueError):
    """The template does not have exactly one TRAIN=( line and one --comment line."""


def render_template(text: str, train_argv: Sequence[str], *, comment: str) -> str:
    """The template `text` running `"$PYTHON" -u <train_argv...>` with job spec `comment`.

    Args:
        text: the template's content.
        train_argv: the script and its arguments (quoted here, never interpreted by a shell
            as anything but words).
        comment: the job spec, e.g. 'hetsched:class=LM (batch size 20);steps=300'; it must
            not contain a double quote.
    """
    if '"' in comment or "\n" in comment:
        raise TemplateError(f"a job spec cannot contain a double quote or newline: {comment!r}")
    train = 'TRAIN=("$PYTHON" -u ' + shlex.join(list(train_argv)) + ")"
    text, n_train = _TRAIN_LINE.subn(lambda _: train, text)
    text, n_comment = _COMMENT_LINE.subn(lambda _: f'#SBATCH --comment="{comment}"', text)
    if (n_train, n_comment) != (1, 1):
        raise TemplateError(
            f"expected one TRAIN=( line and one #SBATCH --comment= line, found {n_train} and "
            f"{n_comment}: the template's marked lines moved"
        )
    return text
