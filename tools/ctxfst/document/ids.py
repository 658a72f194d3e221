"""The forms of the ids a knowledge base uses: entity and chunk ids, tenants, fact names.

One definition each, so what validation accepts the build and the settings accept too.
Standard library only, so anything may import it cheaply (the git hook, the settings).
"""

from __future__ import annotations

import re

# Lowercase ASCII parts joined by ':' (a type prefix such as entity:, state:, goal:).
# A superset of the upstream patterns ^entity:[a-z0-9-]+$ and ^[a-z0-9-]+:[a-z0-9-]+$.
# A string: pydantic's Field(pattern=...) and the JSON Schemas take it as one.
ID_PATTERN = r"^[a-z0-9_.-]+(:[a-z0-9_.-]+)*$"
ID_HINT = ("lowercase letters, digits, '-', '_' or '.', with ':' between parts "
           "(for example entity:fastapi or skill:python-async)")

DEFAULT_TENANT = "default"
TENANT_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
TENANT_HINT = "letters A-Z a-z, digits, '_' or '-' (for example acme or team_42)"

# A fact's namespace and key.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]*")
NAME_HINT = "lowercase letters, digits, '_', '.' or '-', starting with a letter or digit"
