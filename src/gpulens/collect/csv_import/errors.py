"""The one error the CSV importer raises on bad input: it names the file, row, column, problem."""

from __future__ import annotations

from gpulens.errors import CollectError


class CsvImportError(CollectError):
    """A CSV file (or archive member) gpulens cannot import.

    `source` is the file (``archive.tar.gz:member.csv`` inside an archive), `row` the 1-based
    data row (0 when no row is to blame; the file line is row + 1 after the header, unless
    quoted values span lines), `column` the CSV column ("" when none) and `detail` what was
    wrong, quoting the offending value.
    """

    def __init__(self, source: str, detail: str, *, row: int = 0, column: str = "") -> None:
        self.source = source
        self.row = row
        self.column = column
        self.detail = detail
        where = source
        if row > 0:
            where += f", row {row} (line {row + 1})"
        if column:
            where += f", column {column!r}"
        super().__init__(
            f"cannot import {where}: {detail}. Fix the file or the column mapping "
            "(--time-column, --time-unit, --label, --map; see docs/importing.md)."
        )
