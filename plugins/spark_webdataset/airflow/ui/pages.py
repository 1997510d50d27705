"""Server-rendered HTML for the view (Jinja2, autoescaped; no JavaScript build)."""

from __future__ import annotations

from jinja2 import DictLoader, Environment, select_autoescape

from ...format.sizes import format_size

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}WebDataset{% endblock %}</title>
<style>
 body{font-family:system-ui,sans-serif;margin:1.2rem;color:#1b1f24;background:#fff}
 table{border-collapse:collapse;margin:.6rem 0}
 th,td{border-bottom:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top;font-size:.9rem}
 th{background:#f3f5f7} .num{text-align:right;font-variant-numeric:tabular-nums}
 .error{color:#b42318} .ok{color:#1a7f37} .muted{color:#667085} code{font-size:.85rem}
 .state{padding:.05rem .4rem;border-radius:.6rem;background:#eef1f4;font-size:.8rem}
 .state-latest{background:#1a7f37;color:#fff} .state-published{background:#cce8d4} .state-sealed{background:#e3ecf9}
 .state-invalid,.state-error{background:#fbd5d0} .state-not-committed{background:#fdf0c4}
 .samples{display:flex;flex-wrap:wrap;gap:.6rem} .sample{border:1px solid #d0d7de;border-radius:.4rem;padding:.4rem;max-width:16rem;font-size:.8rem}
 .sample img{image-rendering:pixelated;width:64px;height:auto;display:block;margin:.2rem 0;background:#000}
 nav a{margin-right:.6rem}
</style></head><body>
<nav><a href="{{ base }}/">Datasets</a>{% block crumbs %}{% endblock %}</nav>
{% block body %}{% endblock %}
</body></html>"""

_DATASETS = """{% extends "base" %}{% block body %}
<h1>WebDataset datasets</h1>
<p class="muted">Configs from <code>{{ folder }}</code>.</p>
<table id="datasets"><tr><th>Dataset</th><th>Root</th><th>LATEST</th><th class="num">Versions</th><th class="num">Published</th><th>Last published</th></tr>
{% for d in datasets %}<tr class="dataset" data-name="{{ d.name }}">
 <td><a href="{{ base }}/datasets/{{ d.name|urlencode }}">{{ d.name }}</a></td><td><code>{{ d.root or "" }}</code></td>
 {% if d.error %}<td colspan="4" class="error">{{ d.error }}</td>
 {% else %}<td>{% if d.latest %}<a class="latest" href="{{ base }}/datasets/{{ d.name|urlencode }}/versions/{{ d.latest|urlencode }}">{{ d.latest }}</a>{% else %}<span class="muted">none</span>{% endif %}</td>
 <td class="num">{{ d.versions }}</td><td class="num">{{ d.published }}</td><td>{{ d.last_published_at or "" }}</td>{% endif %}
</tr>{% else %}<tr><td colspan="6" class="muted">No dataset configs.</td></tr>{% endfor %}
</table>{% endblock %}"""

_VERSIONS = """{% extends "base" %}{% block title %}{{ name }} - WebDataset{% endblock %}
{% block crumbs %} / <a href="{{ base }}/datasets/{{ name|urlencode }}">{{ name }}</a>{% endblock %}{% block body %}
<h1>{{ name }}</h1>
<p>Root <code>{{ v.root }}</code>, LATEST {% if v.latest %}<a id="latest" href="{{ base }}/datasets/{{ name|urlencode }}/versions/{{ v.latest|urlencode }}">{{ v.latest }}</a>{% else %}<span class="muted">none</span>{% endif %}, {{ v.total }} versions.</p>
<p id="gc-would-free">{% if gc.error %}<span class="muted">What gc would free: cannot tell ({{ gc.error }})</span>
{% else %}gc {% if gc.configured %}(the config's retention: keep_last {{ gc.keep_last }}{% if gc.keep_days is not none %}, keep_days {{ gc.keep_days }}{% endif %}){% else %}with <code>--keep-last 1</code> (no retention configured){% endif %}, min-age {{ (gc.min_age_seconds / 3600)|round(2) }}h,
would free {{ size(gc.bytes) }} in {{ gc.files }} files{% if gc.retire %}, retiring {{ gc.retire|join(", ") }}{% endif %}{% if gc.remove %}, removing unpublished {{ gc.remove|join(", ") }}{% endif %}.{% endif %}</p>
<table id="versions"><tr><th>Version</th><th>Logical date</th><th>State</th><th class="num">Shards</th><th class="num">Samples</th><th class="num">Bytes</th><th>Validated at</th><th>Published at</th></tr>
{% for r in v.versions %}<tr class="version" data-version="{{ r.version }}">
 <td><a href="{{ base }}/datasets/{{ name|urlencode }}/versions/{{ r.version|urlencode }}">{{ r.version }}</a></td>
 {% if r.error %}<td colspan="7" class="error">{{ r.error }}</td>{% else %}
 <td>{{ r.logical_date or "" }}</td><td><span class="state state-{{ r.state|replace(' ', '-') }}">{{ r.state }}</span>{% if r.validated is false %} <span class="error">({{ r.validation_errors }} errors)</span>{% endif %}</td>
 <td class="num">{{ r.shards if r.shards is not none else "" }}</td><td class="num">{{ r.samples if r.samples is not none else "" }}</td>
 <td class="num">{{ size(r.bytes) if r.bytes is not none else "" }}</td><td>{{ r.validated_at or "" }}</td><td>{{ r.published_at or "" }}</td>{% endif %}
</tr>{% endfor %}</table>
<p>Page {{ v.page }} of {{ v.pages }}
{% if v.page > 1 %}<a href="?page={{ v.page - 1 }}">newer</a>{% endif %}
{% if v.page < v.pages %}<a href="?page={{ v.page + 1 }}">older</a>{% endif %}</p>
{% endblock %}"""

_VERSION = """{% extends "base" %}{% block title %}{{ name }} {{ v.version }} - WebDataset{% endblock %}
{% block crumbs %} / <a href="{{ base }}/datasets/{{ name|urlencode }}">{{ name }}</a> / {{ v.version }}{% endblock %}{% block body %}
{% set vbase = base ~ "/datasets/" ~ (name|urlencode) ~ "/versions/" ~ (v.version|urlencode) %}
<h1>{{ name }} / {{ v.version }} <span class="state state-{{ v.state|replace(' ', '-') }}">{{ v.state }}</span></h1>
<p><code>{{ v.uri }}</code>{% if v.samples is not none %}: {{ v.samples }} samples, {{ size(v.bytes) }} in {{ v.shards|length }} shards{% else %}: <span class="error">{{ v.state }}</span>{% endif %}.
Fields: {% for f in v.fields %}<code>{{ f.name }}</code> ({{ f.type }}){% if not loop.last %}, {% endif %}{% endfor %}</p>
{% if v.parent %}<p id="parent">Built on <a href="{{ base }}/datasets/{{ name|urlencode }}/versions/{{ v.parent|urlencode }}">{{ v.parent }}</a>: {{ size(v.bytes_stored) }} stored here, {{ size(v.bytes_referenced) }} referenced.</p>{% endif %}
{% if v.sample_index_layers %}<p id="index-layers">Sample index: {{ size(v.sample_index_bytes) }} stored here, read over {{ v.sample_index_layers|length }} layer(s) of its ancestors ({{ size(v.sample_index_layers|sum(attribute="bytes")) }}: {% for l in v.sample_index_layers %}{{ l.version }}{% if not loop.last %}, {% endif %}{% endfor %}).</p>{% endif %}

<h2>Validation</h2>
{% if v.validation is none %}<p class="muted">Not validated.</p>
{% else %}<p id="validation" class="{{ 'ok' if v.validation.ok else 'error' }}">{{ "valid" if v.validation.ok else "invalid" }}, checked at {{ v.validation.checked_at }}{% if not v.validation.ok %}: {{ v.validation.error_count }} error(s){% endif %}.</p>
{% if v.validation.errors %}<table id="validation-errors"><tr><th>Shard</th><th class="num">Offset</th><th>Key</th><th>Error</th></tr>
{% for e in v.validation.errors %}<tr><td>{{ e.shard or "" }}</td><td class="num">{{ e.offset if e.offset is not none else "" }}</td><td>{{ e.key or "" }}</td><td>{{ e.error }}</td></tr>{% endfor %}</table>{% endif %}{% endif %}

<h2>Publish record</h2>
{% if v.publish_record %}<p id="published">Published at {{ v.publish_record.published_at }} (logical date {{ v.publish_record.logical_date }}); index <a href="{{ api }}/index">{{ v.index }}</a>.</p>
<pre>{{ record_json }}</pre>{% else %}<p class="muted">Not published.</p>{% endif %}

<h2 id="preview">Samples{% if shard %} of {{ shard }}{% endif %}</h2>
<form method="get" action="{{ vbase }}#preview">
 {% if shard %}<input type="hidden" name="shard" value="{{ shard }}">{% endif %}
 <label>N <input name="n" type="number" min="1" max="64" value="{{ n }}" size="3"></label>
 <button name="mode" value="first" type="submit" id="first">first N</button>
 <label>seed <input name="seed" type="number" value="{{ seed }}" size="6"></label>
 <button name="mode" value="random" type="submit" id="random">random N</button>
 {% if not shard %}<label>key <input name="key" id="key" value="{{ key or '' }}" size="16"></label>
 <button name="mode" value="key" type="submit" id="by-key">show key</button>{% endif %}
</form>
{% if preview_error %}<p class="error">{{ preview_error }}</p>{% endif %}
{% if preview %}<p class="muted">{{ preview.count }} samples ({{ mode }}{% if mode == "random" %}, seed {{ seed }}{% endif %}{% if mode == "key" %} {{ key }}{% endif %}{% if preview.indexed %}, by the sample index{% endif %}), {{ size(preview.bytes_read) }} read{% if preview.stopped == "budget" %}, stopped at the read budget{% endif %}.</p>
{% for e in preview.errors %}<p class="error">{{ e.shard }}: {{ e.error }}</p>{% endfor %}
<div class="samples" id="samples">{% for s in preview.samples %}
<div class="sample" data-key="{{ s.key }}" data-label="{{ s.label or '' }}"><b>{{ s.key }}</b> <span class="muted">{{ s.shard }}@{{ s.offset }}</span>
{% for f in s.fields %}<div class="field field-{{ f.kind }}">{% if f.kind == "image" %}<img alt="{{ s.key }}.{{ f.field }}" src="{{ f.data_url }}">
{% elif f.kind in ("text", "json") %}<code>.{{ f.field }}</code> <span class="value">{{ f.text }}</span>{% if f.truncated %}…{% endif %}
{% else %}<code>.{{ f.field }}</code> <span class="muted">{{ f.type }}, {{ size(f.bytes) }}</span>{% endif %}</div>{% endfor %}
</div>{% endfor %}</div>{% endif %}

<h2>Shards</h2>
<table id="shards"><tr><th>Shard</th><th class="num">Samples</th><th class="num">Bytes</th><th>crc32c</th><th>Key range</th><th></th></tr>
{% for s in v.shards %}<tr><td>{{ s.name }}</td><td class="num">{{ s.samples }}</td><td class="num">{{ size(s.bytes) }}</td><td><code>{{ s.crc32c or "" }}</code></td>
<td><code>{{ s.first_key }}</code> .. <code>{{ s.last_key }}</code></td><td><a href="{{ vbase }}?shard={{ s.name|urlencode }}#preview">preview</a></td></tr>{% endfor %}</table>
{% endblock %}"""

_ERROR = """{% extends "base" %}{% block body %}<h1>{{ title }}</h1><p class="error">{{ message }}</p>{% endblock %}"""

_ENV = Environment(
    loader=DictLoader(
        {"base": _BASE, "datasets": _DATASETS, "versions": _VERSIONS, "version": _VERSION, "error": _ERROR}
    ),
    autoescape=select_autoescape(default=True, default_for_string=True),
)
_ENV.globals["size"] = format_size


def render(template: str, **context) -> str:
    return _ENV.get_template(template).render(**context)
