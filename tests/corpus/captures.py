"""Bad capture shapes for `gpulens ingest`: one generator per shape, none committed as a file.

Each `CASES[name](directory, size)` writes one file of about `size` bytes into `directory` and
returns its path; for a gzip file `size` is the inflated size (what the limits count), so a
bomb of 2 GB is a file of a few MB. `INGEST_ARGS[name]` are the `gpulens ingest` options the
file needs besides its path (an empty list: the format is detected from the content).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path

#: a dcgm-exporter series line as the exporter prints it; {gpu}, {model} and {value} vary
SERIES = (
    'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-0946f70c-659b-4c39-8b78-7e76000000{gpu:02d}",'
    'pci_bus_id="00000000:03:00.0",device="nvidia{gpu}",modelName="{model}",'
    'Hostname="node-1",DCGM_FI_DRIVER_VERSION="580.126.09"}} {value}\n'
)
HEADER = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"

XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
\t<driver_version>550.54.15</driver_version>
\t<gpu id="00000000:07:00.0">
\t\t<product_name>{model}</product_name>
\t\t<uuid>{uuid}</uuid>
\t\t<utilization>
\t\t\t<gpu_util>42 %</gpu_util>
\t\t</utilization>
\t</gpu>
</nvidia_smi_log>
"""
UUID = "GPU-2f8e8b62-1a3c-4b4e-9f61-8c1e0b6d7a55"

CSV_MAP = ["--format", "csv", "--time-column", "time", "--time-unit", "s"]
CSV_MAP += ["--label", "node=host", "--map", "util=gpu_util_ratio:percent"]


def _gzip_repeated(path: Path, header: bytes, block: bytes, size: int) -> Path:
    """A gzip file of `header` then `block` repeated until about `size` inflated bytes."""
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz,
    ):
        gz.write(header)
        written = len(header)
        chunk = block * max(1, (1 << 20) // len(block))
        while written < size:
            gz.write(chunk)
            written += len(chunk)
    return path


def huge_label_value(directory: Path, size: int) -> Path:
    """A dcgm-exporter page of 8 GPUs whose model name label is about `size` / 8 bytes."""
    model = "A" * max(1, size // 8)
    text = HEADER + "".join(SERIES.format(gpu=g, model=model, value=50) for g in range(8))
    path = directory / "huge-label.prom"
    path.write_text(text)
    return path


def long_line(directory: Path, size: int) -> Path:
    """A dcgm-exporter page whose HELP line alone is `size` bytes long (no newline in it)."""
    path = directory / "long-line.prom"
    with path.open("w") as fh:
        fh.write("# HELP DCGM_FI_DEV_GPU_UTIL ")
        fh.write("x" * size)
        fh.write("\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        fh.write(SERIES.format(gpu=0, model="NVIDIA H100", value=50))
    return path


def many_series(directory: Path, size: int) -> Path:
    """A valid dcgm-exporter page of about `size` bytes: the same 8 GPUs, printed again and
    again (many tiny lines)."""
    block = "".join(SERIES.format(gpu=g, model="NVIDIA H100", value=50) for g in range(8))
    path = directory / "many-series.prom"
    with path.open("w") as fh:
        fh.write(HEADER)
        chunk = block * max(1, min(size, 1 << 20) // len(block))
        for _ in range(max(1, size // len(chunk))):
            fh.write(chunk)
    return path


def many_gpus(directory: Path, size: int) -> Path:
    """A dcgm-exporter page of about `size` bytes in which every series is another GPU."""
    path = directory / "many-gpus.prom"
    with path.open("w") as fh:
        fh.write(HEADER)
        written, gpu = 0, 0
        while written < size:
            block = "".join(
                SERIES.format(gpu=g, model="NVIDIA H100", value=50) for g in range(gpu, gpu + 4096)
            )
            fh.write(block)
            written += len(block)
            gpu += 4096
    return path


def whitespace_prom(directory: Path, size: int) -> Path:
    """A dcgm-exporter page padded with `size` bytes of blank lines and spaces."""
    path = directory / "whitespace.prom"
    with path.open("w") as fh:
        fh.write(HEADER + SERIES.format(gpu=0, model="NVIDIA H100", value=50))
        chunk = (" " * 63 + "\n") * max(1, min(size, 1 << 20) // 64)
        for _ in range(max(1, size // len(chunk))):
            fh.write(chunk)
    return path


def empty_prom(directory: Path, size: int) -> Path:
    """An empty .prom file (a scrape that returned nothing)."""
    path = directory / "empty.prom"
    path.write_bytes(b"")
    return path


def valid_csv_gz(directory: Path, size: int) -> Path:
    """A .csv.gz of valid rows (epoch seconds, a node, a utilisation), `size` bytes inflated."""
    rows = "".join(f"{1764424800 + i},n{i % 4},{i % 100}\n" for i in range(1000))
    return _gzip_repeated(directory / "rows.csv.gz", b"time,node,util\n", rows.encode(), size)


def gzip_bomb(directory: Path, size: int) -> Path:
    """A .csv.gz that inflates to `size` zero bytes (a few KB per GB on disk)."""
    path = directory / "bomb.csv.gz"
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        for _ in range(max(1, size >> 20)):
            fh.write(compressor.compress(zeros))
        fh.write(compressor.flush())
    return path


def corrupt_gzip(directory: Path, size: int) -> Path:
    """A .csv.gz of valid rows whose compressed stream is overwritten just after the gzip
    header (zlib fails on the first block: "Error -3 while decompressing")."""
    data = bytearray(valid_csv_gz(directory, size).read_bytes())
    data[10] = 0x07  # the first deflate block: final, of the reserved type 3
    path = directory / "corrupt.csv.gz"
    path.write_bytes(bytes(data))
    return path


def nvsmi_csv_rows(directory: Path, size: int) -> Path:
    """Valid `nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,memory.used,power.draw
    --format=csv` output of about `size` bytes (the same 8 GPUs, row after row)."""
    header = "index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
    rows = "".join(
        f"{g}, GPU-2f8e8b62-1a3c-4b4e-9f61-8c1e0b6d7a{g:02d}, NVIDIA H100 80GB HBM3, "
        f"{g * 10} %, {g * 1000} MiB, {100 + g}.50 W\n"
        for g in range(8)
    )
    path = directory / "nvsmi-rows.csv"
    with path.open("w") as fh:
        fh.write(header)
        chunk = rows * max(1, min(size, 1 << 20) // len(rows))
        for _ in range(max(1, size // len(chunk))):
            fh.write(chunk)
    return path


def xml_many_gpus(directory: Path, size: int) -> Path:
    """nvidia-smi XML of about `size` bytes: one `<gpu>` after another."""
    head, tail = XML.format(model="NVIDIA H100", uuid=UUID).split("\t<gpu ", 1)
    gpu = "\t<gpu " + tail.rsplit("</nvidia_smi_log>", 1)[0]
    path = directory / "many-gpus.xml"
    with path.open("w") as fh:
        fh.write(head)
        chunk = gpu * max(1, min(size, 1 << 20) // len(gpu))
        for _ in range(max(1, size // len(chunk))):
            fh.write(chunk)
        fh.write("</nvidia_smi_log>\n")
    return path


def nvsmi_name_uuid_csv(directory: Path, size: int) -> Path:
    """`nvidia-smi --query-gpu=name,uuid --format=csv` output: identity, no metric at all."""
    path = directory / "name-uuid.csv"
    path.write_text(f"name, uuid\nNVIDIA H100 80GB HBM3, {UUID}\n")
    return path


def xml_not_utf8(directory: Path, size: int) -> Path:
    """nvidia-smi XML with a Latin-1 model name and no encoding declaration."""
    path = directory / "latin1.xml"
    path.write_bytes(XML.format(model="Quadro RTX 6000 \xe9dition", uuid=UUID).encode("latin-1"))
    return path


def xml_xxe(directory: Path, size: int) -> Path:
    """nvidia-smi XML whose uuid and model name come from external entities (XXE)."""
    doctype = (
        '<!DOCTYPE nvidia_smi_log [\n<!ENTITY id SYSTEM "file:///etc/hostname">\n'
        '<!ENTITY model SYSTEM "http://example.invalid/model">\n]>'
    )
    text = XML.format(model="&model;", uuid="GPU-&id;").replace(
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', doctype
    )
    path = directory / "xxe.xml"
    path.write_text(text)
    return path


def xml_billion_laughs(directory: Path, size: int) -> Path:
    """nvidia-smi XML whose model name is an entity that expands exponentially."""
    entities = ['<!ENTITY l0 "lol">'] + [
        f'<!ENTITY l{i} "' + f"&l{i - 1};" * 10 + '">' for i in range(1, 10)
    ]
    doctype = "<!DOCTYPE nvidia_smi_log [\n" + "\n".join(entities) + "\n]>"
    text = XML.format(model="&l9;", uuid=UUID).replace(
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', doctype
    )
    path = directory / "laughs.xml"
    path.write_text(text)
    return path


def xml_deep(directory: Path, size: int) -> Path:
    """nvidia-smi XML with elements nested about `size` / 7 deep inside the GPU."""
    depth = max(1, size // 7)
    path = directory / "deep.xml"
    with path.open("w") as fh:
        head, tail = XML.format(model="NVIDIA H100", uuid=UUID).split("\t</gpu>")
        fh.write(head)
        fh.write("<a>" * depth)
        fh.write("</a>" * depth)
        fh.write("\t</gpu>" + tail)
    return path


CASES: dict[str, Callable[[Path, int], Path]] = {
    "huge-label-value": huge_label_value,
    "long-line": long_line,
    "many-series": many_series,
    "many-gpus": many_gpus,
    "whitespace-prom": whitespace_prom,
    "empty-prom": empty_prom,
    "valid-csv-gz": valid_csv_gz,
    "gzip-bomb": gzip_bomb,
    "corrupt-gzip": corrupt_gzip,
    "nvsmi-csv-rows": nvsmi_csv_rows,
    "xml-many-gpus": xml_many_gpus,
    "nvsmi-name-uuid-csv": nvsmi_name_uuid_csv,
    "xml-not-utf8": xml_not_utf8,
    "xml-xxe": xml_xxe,
    "xml-billion-laughs": xml_billion_laughs,
    "xml-deep": xml_deep,
}

INGEST_ARGS: dict[str, list[str]] = {
    "huge-label-value": ["--format", "dcgm-exporter"],
    "long-line": ["--format", "dcgm-exporter"],
    "many-series": ["--format", "dcgm-exporter"],
    "many-gpus": ["--format", "dcgm-exporter"],
    "whitespace-prom": ["--format", "dcgm-exporter"],
    "empty-prom": ["--format", "dcgm-exporter"],
    "valid-csv-gz": CSV_MAP,
    "gzip-bomb": CSV_MAP,
    "corrupt-gzip": CSV_MAP,
    "nvsmi-csv-rows": ["--format", "nvidia-smi-csv"],
    "xml-many-gpus": ["--format", "nvidia-smi-xml"],
    "nvsmi-name-uuid-csv": ["--format", "nvidia-smi-csv"],
    "xml-not-utf8": ["--format", "nvidia-smi-xml"],
    "xml-xxe": ["--format", "nvidia-smi-xml"],
    "xml-billion-laughs": ["--format", "nvidia-smi-xml"],
    "xml-deep": ["--format", "nvidia-smi-xml"],
}
