"""The shader binding table (SBT): per-program records that OptiX reads at launch.

Each record starts with a 32-byte opaque header that names a program group
(`ProgramGroup.pack_header`, i.e. optixSbtRecordPackHeader), followed by user data the
group's programs read (`optix.sbt_data` / `optix.sbt_data_pointer`). Records of one
section (raygen, miss, hit groups, callables, exception) share a stride, a multiple of
16 bytes, and start 16-byte aligned. Records here are NumPy structured arrays: a
``header`` field and the data fields after it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SBT_RECORD_HEADER_SIZE", "SBT_RECORD_ALIGNMENT", "record_dtype", "make_records",
           "ShaderBindingTable", "create_sbt", "sbt_struct", "SECTIONS"]

#: OPTIX_SBT_RECORD_HEADER_SIZE and OPTIX_SBT_RECORD_ALIGNMENT.
SBT_RECORD_HEADER_SIZE = 32
SBT_RECORD_ALIGNMENT = 16

#: The sections of a table, in OptixShaderBindingTable order.
SECTIONS = ("raygen", "exception", "miss", "hitgroup", "callables")


def record_dtype(data=None) -> np.dtype:
    """The dtype of SBT records carrying `data`.

    Parameters
    ----------
    data : numpy dtype-like, optional
        A structured dtype (or a list of ``(name, format)`` fields) of the user data;
        None for header-only records.

    Returns
    -------
    numpy.dtype
        Field ``header`` (32 raw bytes) at offset 0, then each data field at its aligned
        offset after the header; the size is rounded up to a multiple of 16.

    Raises
    ------
    ValueError
        A data field named ``header``, or data alignment above 16 bytes.

    Examples
    --------
    >>> record_dtype([("color", "f4", 3)]).itemsize
    48
    """
    names, formats, offsets = ["header"], [np.dtype((np.void, SBT_RECORD_HEADER_SIZE))], [0]
    end = SBT_RECORD_HEADER_SIZE
    if data is not None:
        data = np.dtype(data)
        if data.names is None:
            raise ValueError(f"SBT record data must be a structured dtype (named fields), "
                             f"got {data}")
        if not data.isalignedstruct:
            data = np.dtype([(n, data.fields[n][0]) for n in data.names], align=True)
        if "header" in data.names:
            raise ValueError("an SBT record data field may not be named 'header'")
        if data.alignment > SBT_RECORD_ALIGNMENT:
            raise ValueError(f"SBT record data aligned to {data.alignment} bytes; records "
                             f"are aligned to {SBT_RECORD_ALIGNMENT}")
        for name in data.names:
            fdt, offset = data.fields[name][:2]
            names.append(name)
            formats.append(fdt)
            offsets.append(SBT_RECORD_HEADER_SIZE + offset)
        end = SBT_RECORD_HEADER_SIZE + data.itemsize
    size = -(-end // SBT_RECORD_ALIGNMENT) * SBT_RECORD_ALIGNMENT
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": size})


def make_records(groups, data=None, dtype=None) -> np.ndarray:
    """Host records for one SBT section.

    Parameters
    ----------
    groups : ProgramGroup or sequence of ProgramGroup
        One group per record (a single group is repeated for every row of `data`).
        Anything with ``pack_header() -> bytes`` of 32 bytes works.
    data : array-like, optional
        One entry per record: a structured array, a sequence of tuples, or of dicts.
    dtype : numpy dtype-like, optional
        The data dtype (default: `data`'s, when it is a structured array).

    Returns
    -------
    numpy.ndarray
        Of `record_dtype(dtype)`, headers packed.

    Raises
    ------
    ValueError
        Counts that do not match, a header that is not 32 bytes, data fields missing.
    """
    if dtype is None and data is not None:
        dtype = getattr(data, "dtype", None)
        if dtype is None or dtype.names is None:
            raise ValueError("pass dtype= (a structured dtype) for record data that is not "
                             "a structured array")
    rdtype = record_dtype(dtype)
    single = not isinstance(groups, (list, tuple))
    if data is None:
        count = 1 if single else len(groups)
    else:
        count = len(data)
    group_list = [groups] * count if single else list(groups)
    if len(group_list) != count:
        raise ValueError(f"{len(group_list)} program groups for {count} records")
    if count == 0:
        raise ValueError("an SBT section needs at least one record")
    records = np.zeros(count, dtype=rdtype)
    headers: dict = {}
    for k, group in enumerate(group_list):
        header = headers.get(id(group))
        if header is None:
            header = bytes(group.pack_header())
            if len(header) != SBT_RECORD_HEADER_SIZE:
                raise ValueError(f"a packed SBT header is {SBT_RECORD_HEADER_SIZE} bytes, "
                                 f"got {len(header)}")
            headers[id(group)] = header
        records["header"][k] = np.frombuffer(header, dtype=np.uint8).view(
            records.dtype["header"])[0]
    if data is not None:
        data_names = [n for n in rdtype.names if n != "header"]
        if isinstance(data, np.ndarray) and data.dtype.names is not None:
            missing = set(data_names) - set(data.dtype.names)
            if missing:
                raise ValueError(f"record data lacks fields {sorted(missing)}")
            for name in data_names:
                records[name] = data[name]
        else:
            for k, item in enumerate(data):
                if isinstance(item, dict):
                    unknown = set(item) - set(data_names)
                    if unknown:
                        raise ValueError(f"record {k}: unknown fields {sorted(unknown)}")
                    for name, value in item.items():
                        records[name][k] = value
                else:
                    item = tuple(item)
                    if len(item) != len(data_names):
                        raise ValueError(f"record {k}: {len(item)} values for fields "
                                         f"{data_names}")
                    for name, value in zip(data_names, item):
                        records[name][k] = value
    return records


def _check_records(section: str, records) -> np.ndarray:
    if not isinstance(records, np.ndarray) or records.dtype.names is None or \
            records.dtype.names[0] != "header":
        raise TypeError(f"the {section} section must be records made by make_records()")
    if records.ndim != 1 or records.size == 0:
        raise ValueError(f"the {section} section must be a non-empty 1-D record array")
    if records.dtype.itemsize % SBT_RECORD_ALIGNMENT:
        raise ValueError(f"{section} records are {records.dtype.itemsize} bytes; the "
                         f"stride must be a multiple of {SBT_RECORD_ALIGNMENT}")
    if records.dtype.fields["header"][1] != 0 or \
            records.dtype.fields["header"][0].itemsize != SBT_RECORD_HEADER_SIZE:
        raise ValueError(f"{section} records must start with the 32-byte header")
    if section in ("raygen", "exception") and records.size != 1:
        raise ValueError(f"the {section} section holds exactly one record")
    return np.ascontiguousarray(records)


def sbt_struct(addresses: dict, strides: dict, counts: dict):
    """A filled ``OptixShaderBindingTable`` cdata (needs no driver).

    Parameters
    ----------
    addresses, strides, counts : dict
        Section name -> device address / record stride / record count; absent sections
        are zero.
    """
    from . import lib
    table = lib.ffi.new("OptixShaderBindingTable *")
    table.raygenRecord = addresses.get("raygen", 0)
    table.exceptionRecord = addresses.get("exception", 0)
    for section, base in (("miss", "miss"), ("hitgroup", "hitgroup"),
                          ("callables", "callables")):
        setattr(table, f"{base}RecordBase", addresses.get(section, 0))
        setattr(table, f"{base}RecordStrideInBytes", strides.get(section, 0))
        setattr(table, f"{base}RecordCount", counts.get(section, 0))
    return table


class ShaderBindingTable:
    """A shader binding table in device memory.

    Made by `create_sbt`. Holds one device buffer per section and the
    ``OptixShaderBindingTable`` that `optixLaunch` reads.

    Attributes
    ----------
    records : dict
        Section -> the host records uploaded.
    buffers : dict
        Section -> `DeviceBuffer`.
    struct : cdata
        The OptixShaderBindingTable.

    Safety
    ------
    A launch reads the records asynchronously: keep the table (and do not `update` it)
    until launches using it finished, or order the changes on the launch's stream.
    """

    __slots__ = ("records", "buffers", "struct", "_closed")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make a shader binding table with cupric.optix.create_sbt(...)")

    @classmethod
    def _create(cls, sections: dict, stream=None) -> "ShaderBindingTable":
        from cupric.runtime.memory import to_device
        self = cls.__new__(cls)
        self._closed = False
        self.records = {}
        self.buffers = {}
        addresses, strides, counts = {}, {}, {}
        for section in SECTIONS:
            records = sections.get(section)
            if records is None:
                continue
            records = _check_records(section, records)
            raw = records.view(np.uint8).reshape(-1)
            buffer = to_device(raw, stream=stream)
            if buffer.ptr % SBT_RECORD_ALIGNMENT:
                raise RuntimeError("device allocation not 16-byte aligned")
            self.records[section] = records
            self.buffers[section] = buffer
            addresses[section] = buffer.ptr
            strides[section] = records.dtype.itemsize
            counts[section] = records.size
        self.struct = sbt_struct(addresses, strides, counts)
        return self

    def update(self, section: str, records, stream=None) -> None:
        """Overwrite a section's records in place (same count and stride)."""
        if self._closed:
            from cupric.runtime.errors import ClosedError
            raise ClosedError("this ShaderBindingTable is closed")
        if section not in self.buffers:
            raise ValueError(f"the table has no {section} section")
        records = _check_records(section, records)
        old = self.records[section]
        if records.dtype.itemsize != old.dtype.itemsize or records.size != old.size:
            raise ValueError(f"{section}: new records must keep the count ({old.size}) and "
                             f"stride ({old.dtype.itemsize})")
        self.buffers[section].copy_from(records.view(np.uint8).reshape(-1), stream)
        self.records[section] = records

    def close(self, stream=None) -> None:
        """Free the device memory (in `stream` order when given)."""
        if self._closed:
            return
        self._closed = True
        for buffer in self.buffers.values():
            buffer.close(stream=stream)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        if self._closed:
            from cupric.runtime.errors import ClosedError
            raise ClosedError("cannot enter a closed ShaderBindingTable")
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_sbt(*, raygen, miss=None, hitgroup=None, exception=None, callables=None,
               stream=None) -> ShaderBindingTable:
    """Upload SBT records (from `make_records`) into a new `ShaderBindingTable`.

    Parameters
    ----------
    raygen : records
        Exactly one record.
    miss, hitgroup, callables : records, optional
        One record per miss ray type / hit group entry / callable.
    exception : records, optional
        Exactly one record.
    stream : Stream, optional
        Allocate and copy in this stream's order.

    Raises
    ------
    TypeError, ValueError
        Records not made by `make_records`, wrong counts or strides (before any GPU use).

    Examples
    --------
    >>> sbt = create_sbt(raygen=make_records(rg), miss=make_records(ms),      # doctest: +SKIP
    ...                  hitgroup=make_records(hg, colors, dtype=[("rgb", "f4", 3)]))
    """
    sections = {"raygen": raygen, "miss": miss, "hitgroup": hitgroup,
                "exception": exception, "callables": callables}
    for section, records in sections.items():
        if records is not None:
            _check_records(section, records)
    return ShaderBindingTable._create(sections, stream)
