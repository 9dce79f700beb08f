"""``fleetplan schema scenario|tenants|split``: the JSON Schema of an input file, so an editor checks YAML as it
is typed.

The schemas come from the pydantic models that check the files (``fleetplan.scenario.schemas``); with the YAML
language server, for example, a first line ``# yaml-language-server: $schema=scenario.schema.json`` in a scenario
file names the schema printed by ``fleetplan schema scenario > scenario.schema.json``.
"""

from __future__ import annotations

import json

import click

from fleetplan.fileio import InputModel
from fleetplan.scenario.schemas import ScenarioFile, TenantsFile
from fleetplan.scenario.split import SplitOptions

#: Input file kind -> the pydantic model that checks it.
SCHEMAS: dict[str, type[InputModel]] = {"scenario": ScenarioFile, "tenants": TenantsFile, "split": SplitOptions}


def json_schema(kind: str) -> dict:
    """The JSON Schema (draft 2020-12) of input file ``kind`` (a key of :data:`SCHEMAS`)."""
    schema = SCHEMAS[kind].model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


@click.command("schema")
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
def schema(kind: str) -> None:
    """Print the JSON Schema of an input file: KIND is scenario (`fleetplan plan`), tenants (`fleetplan
    allocate`) or split (`fleetplan whatif`, the options of `fleetplan ledger split`)."""
    click.echo(json.dumps(json_schema(kind), indent=2))
