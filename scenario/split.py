"""A prefill-here / decode-there design (a "split scenario") into a :class:`fleetplan.costmodels.split.SplitSpec`.

Like scenario -> Problem for plans: :class:`SplitOptions` holds what a user gives (names of the model, sites, GPUs
and trace, SLOs, prices and assumptions to override), as `fleetplan ledger split`, `fleetplan whatif` and the YAML
split files (``datasets/scenarios/split_default.yaml``) spell it; :func:`make_spec` resolves the names through the
catalogs, the trace, the network links and the ledger assumptions. The comparison itself (pools, ledgers,
break-even values) is arithmetic on the resolved record: :mod:`fleetplan.costmodels.split`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.network import NetworkGraph, Site, route_class
from fleetplan.costmodels.prices import GpuPrice, check_price_date, select_egress_table, usable_prices
from fleetplan.costmodels.slo import SLO, TPOT_P95_RANGE_S, TTFT_P95_RANGE_S
from fleetplan.costmodels.split import SplitSpec, apply_variables
from fleetplan.datasets.calibration import load_calibration_table, load_idle_fractions
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.catalog.prices import find_price, load_gpu_prices
from fleetplan.datasets.ledger import load_assumptions
from fleetplan.datasets.network import load_network_graph
from fleetplan.datasets.traces import load_trace, token_mix_from_trace
from fleetplan.errors import InputError
from fleetplan.fileio import InputModel, validate_input

#: Largest user price per GPU-hour accepted, USD (a guard against a price per month or per node-month).
MAX_USD_PER_GPU_HOUR = 1000.0


class SplitOptions(InputModel):
    """What a prefill/decode split design is made of, by name (the options of `fleetplan ledger split`; the keys of
    a split YAML file). Units are in the field names; ranges are checked on construction.

    Build it with :meth:`from_mapping` to get a one-line :class:`~fleetplan.errors.InputError` (file, field, value,
    fix; "did you mean" for unknown keys) instead of pydantic's ValidationError. ``model_json_schema()`` gives the
    JSON schema of split files.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    model: str = Field(min_length=1, description="model name or alias, e.g. llama-3.1-70b")
    prefill_site: str = Field(min_length=1, description="site of the prefill pool, 'cloud:region[:zone]'")
    decode_site: str = Field(min_length=1, description="site of the decode pool (near the users), "
                                                       "'cloud:region[:zone]'")
    trace: str = Field("azure-conv", min_length=1, description="trace (name or file) giving the token mix and rate")
    gpu: str = Field("H100-SXM-80GB", min_length=1, description="GPU type of both pools")
    prefill_gpu: str | None = Field(None, description="GPU type of the prefill pool (default: gpu)")
    decode_gpu: str | None = Field(None, description="GPU type of the decode pool (default: gpu)")
    rate_req_per_s: float | None = Field(None, ge=1e-6, le=1e6,
                                         description="request rate, req/s (default: the trace's)")
    ttft_slo_s: float = Field(2.0, ge=TTFT_P95_RANGE_S[0], le=TTFT_P95_RANGE_S[1],
                              description="p95 TTFT target, seconds (e.g. 0.5 for 500 ms)")
    tpot_slo_s: float = Field(0.1, ge=TPOT_P95_RANGE_S[0], le=TPOT_P95_RANGE_S[1],
                              description="p95 TPOT target, seconds (e.g. 0.05 for 50 ms)")
    pricing_model: str = Field("on-demand", min_length=1, description="pricing model: on-demand, spot, ...")
    prefill_usd_per_gpu_hour: float | None = Field(
        None, ge=0.0, le=MAX_USD_PER_GPU_HOUR,
        description="your price per GPU-hour at the prefill site, USD (instead of the catalog's)")
    decode_usd_per_gpu_hour: float | None = Field(
        None, ge=0.0, le=MAX_USD_PER_GPU_HOUR,
        description="your price per GPU-hour at the decode site, USD (instead of the catalog's)")
    prices_file: str | None = Field(None, description="your own GPU price rows (CSV/YAML, the shipped price "
                                                      "file's columns)")
    price_date: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}$",
                                   description="catalog prices as of this date, YYYY-MM-DD (default: the newest "
                                               "snapshot); compare sites at one consistent snapshot")
    models_file: str | None = Field(None, description="your own model architectures (CSV/YAML with the shipped "
                                                      "models file's columns, or a Hugging Face config.json)")
    egress_file: str | None = Field(None, description="your own egress rows (CSV/YAML, the shipped egress "
                                                      "file's columns)")
    egress_usd_per_gb: float | None = Field(None, ge=0.0, le=5.0, description="flat cross-site egress price, USD "
                                                                             "per GB (instead of the route's table)")
    margin: float = Field(0.1, ge=0.0, le=0.9, description="capacity headroom, a fraction (0..0.9)")
    text_bytes_per_token: float | None = Field(None, ge=0.0, le=100.0, description="bytes of request/response text "
                                                                                   "per token (default: shipped)")
    usd_per_kwh: float | None = Field(None, ge=0.0, le=10.0, description="electricity price, USD per kWh "
                                                                        "(default: shipped)")
    pue: float | None = Field(None, ge=1.0, le=5.0, description="power usage effectiveness (default: shipped)")
    energy_billed: bool = Field(False, description="add energy to the total (own hardware) or not (cloud prices "
                                                   "include power)")
    prompt_tokens: float | None = Field(None, ge=1.0, description="mean prompt length, tokens (default: the "
                                                                  "trace's; p95 scaled with it)")
    output_tokens: float | None = Field(None, ge=1.0, description="mean output length, tokens (default: the "
                                                                  "trace's; p95 scaled with it)")

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, source: str | None = None) -> SplitOptions:
        """Validate ``data`` (keys = field names). Raises InputError naming ``source`` (a file, or None for the
        command line), the field, the value and the fix; unknown keys get the closest known key."""
        try:
            return validate_input(cls, data, source=source or "command line")
        except InputError as exc:
            if exc.field in cls.model_fields and "is missing" in str(exc):
                raise InputError(f"'{exc.field}' is missing: give it in the scenario file or as "
                                 f"--{exc.field.replace('_', '-')}", source=source, field=exc.field) from None
            raise


def _price_at(gpu: GPU, site: Site, pricing_model: str, rows: list[GpuPrice], user_usd_per_gpu_hour: float | None,
              option: str, price_date: str | None = None) -> GpuPrice:
    if user_usd_per_gpu_hour is not None:
        # Node size (the largest tensor-parallel degree tried): the catalog's largest node of this GPU, else 8.
        v = float(user_usd_per_gpu_hour)
        n = max((p.gpus_per_node for p in rows if p.gpu == gpu.name), default=8)
        return GpuPrice(site.cloud, site.region, site.zone, gpu.name, "user", n, v * n, v, pricing_model,
                        source=f"user ({option})")
    # The node size is the largest instance priced for this GPU at the site: tensor parallelism needs the GPUs in
    # one node, so a 1-GPU VM's price must not stand for the site when 8-GPU nodes are priced there too.
    sizes = [p.gpus_per_node for p in usable_prices(rows, price_date=price_date) if p.gpu == gpu.name
             and p.cloud == site.cloud and p.region == site.region and p.pricing_model == pricing_model]
    try:
        return find_price(gpu.name, site.cloud, site.region, pricing_model, rows, zone=site.zone or None,
                          gpus_per_node=max(sizes, default=None), price_date=price_date)
    except InputError as exc:
        # Only the rows that can be chosen (not superseded or flagged: fleetplan data prices --check lists those).
        here = sorted({f"{p.gpu} ({p.pricing_model})" for p in usable_prices(rows, price_date=price_date)
                       if p.cloud == site.cloud and p.region == site.region and (not site.zone or p.zone == site.zone)})
        why = exc.args[0] if exc.args else str(exc)
        raise InputError(f"site {site.name} has no usable {pricing_model} price for {gpu.name} ({why}). Usable "
                         f"at {site.name}: {', '.join(here) if here else 'nothing'}. Give a price with {option} "
                         "USD_PER_GPU_HOUR, a --price-date of an older snapshot, or a row with --prices FILE (the "
                         "shipped price file's columns)", field="price", value=f"{site.name}/{gpu.name}") from None


def make_spec(options: SplitOptions, *, graph: NetworkGraph | None = None) -> SplitSpec:
    """Resolve ``options`` into a :class:`~fleetplan.costmodels.split.SplitSpec`: model and GPUs from the catalog,
    token mix and rate from the trace (rate = requests / span unless given), prices from the catalog (or the user),
    egress tables for the routes, links from ``graph`` (default: the shipped network links), roofline calibration
    and idle power from datasets/data/calibration, assumptions from datasets/data/ledger/assumptions.csv unless
    given; then the prompt/output lengths and the flat egress price when given.

    Raises:
        UnknownNameError: unknown model, GPU, trace, cloud.
        InputError: malformed site, a missing price (names the site and GPU, lists what is priced there, and says how
            to give one), a missing egress table, out-of-range numbers.
    """
    o = options
    m = get_model(o.model, o.models_file)
    ps, ds = Site.parse(o.prefill_site), Site.parse(o.decode_site)
    pg = get_gpu(o.prefill_gpu or o.gpu)
    dg = get_gpu(o.decode_gpu or o.gpu)
    tr = load_trace(o.trace)
    mix = token_mix_from_trace(tr)
    rate = (len(tr) / tr.span_s) if o.rate_req_per_s is None else o.rate_req_per_s
    slo = SLO(o.ttft_slo_s, o.tpot_slo_s)
    prices = load_gpu_prices(o.prices_file) if o.prices_file else load_gpu_prices()
    check_price_date(o.price_date, prices=prices)  # a real date, not before every dated snapshot
    pp = _price_at(pg, ps, o.pricing_model, prices, o.prefill_usd_per_gpu_hour, "--prefill-usd-per-gpu-hour",
                   o.price_date)
    dp = _price_at(dg, ds, o.pricing_model, prices, o.decode_usd_per_gpu_hour, "--decode-usd-per-gpu-hour",
                   o.price_date)
    tables = load_egress(o.egress_file) if o.egress_file else load_egress()
    kv_t = select_egress_table(ps.cloud, route_class(ps, ds), tables)
    pr_t = select_egress_table(ds.cloud, route_class(ds, ps), tables)
    resp_t = select_egress_table(ds.cloud, "internet", tables)
    g = graph or load_network_graph()
    a = load_assumptions()
    spec = SplitSpec(
        m, mix, rate, slo, ps.name, ds.name, pg, dg, pp, dp, kv_t, pr_t, resp_t, g.link(ps, ds), g.inter_node_link(),
        calibrations=load_calibration_table(), idle_fractions=load_idle_fractions(),
        text_bytes_per_token=(a["text_bytes_per_token"].value if o.text_bytes_per_token is None
                              else o.text_bytes_per_token),
        usd_per_kwh=a["electricity_usd_per_kwh"].value if o.usd_per_kwh is None else o.usd_per_kwh,
        pue=a["pue"].value if o.pue is None else o.pue, margin=o.margin, energy_billed=o.energy_billed,
        trace=tr.name)
    given = {"egress_usd_per_gb": o.egress_usd_per_gb, "prompt_tokens": o.prompt_tokens,
             "output_tokens": o.output_tokens}
    return apply_variables(spec, {k: v for k, v in given.items() if v is not None})


__all__ = ["MAX_USD_PER_GPU_HOUR", "SplitOptions", "make_spec"]
