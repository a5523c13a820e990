#!/usr/bin/env python3
"""Lists the library's public items whose documentation has no code example; exits 1 if any.

Reads the rustdoc JSON that `scripts/test.sh` has rustdoc write (target/doc/redmutex.json)
and walks the public API from the crate root, following re-exports, the way a user reaches
it. An item needs an example when rustdoc's own lint (`missing_doc_code_examples`) would
ask for one: functions, methods of inherent impls, structs, enums, unions and traits, with
their methods. Constants, type aliases, modules, fields, variants and trait impls do not.
"""
import json
import sys

NEEDS_EXAMPLE = {"function", "struct", "enum", "union", "trait"}


def kind_of(item):
    inner = item["inner"]
    return next(iter(inner)) if isinstance(inner, dict) else inner


def main(path):
    with open(path) as f:
        doc = json.load(f)
    index = doc["index"]
    seen = set()
    missing = []
    total = 0

    def check(item, where):
        nonlocal total
        total += 1
        if "```" not in (item.get("docs") or ""):
            span = item.get("span") or {}
            line = (span.get("begin") or [0])[0]
            missing.append(f"{span.get('filename', '?')}:{line}: {where}")

    def methods(type_item, where):
        inner = type_item["inner"][kind_of(type_item)]
        for impl_id in inner.get("impls", []):
            impl = index[str(impl_id)]["inner"]["impl"]
            if impl.get("trait") or impl.get("is_synthetic") or impl.get("blanket_impl"):
                continue
            for method_id in impl["items"]:
                method = index[str(method_id)]
                if method.get("visibility") == "public" and kind_of(method) == "function":
                    check(method, f"{where}::{method['name']}")

    def walk(item_id, path):
        if item_id in seen or str(item_id) not in index:
            return
        seen.add(item_id)
        item = index[str(item_id)]
        kind = kind_of(item)
        inner = item["inner"][kind]
        where = f"{path}::{item['name']}" if item.get("name") else path
        if kind == "module":
            for child in inner["items"]:
                walk(child, where)
        elif kind == "use":
            target = inner.get("id")
            if target is None:
                return
            if inner.get("is_glob"):
                module = index.get(str(target))
                if module and kind_of(module) == "module":
                    for child in module["inner"]["module"]["items"]:
                        walk(child, path)
            else:
                walk(target, path)
        elif kind in NEEDS_EXAMPLE:
            check(item, where)
            if kind == "trait":
                for method_id in inner["items"]:
                    method = index[str(method_id)]
                    if kind_of(method) == "function":
                        check(method, f"{where}::{method['name']}")
            else:
                methods(item, where)

    walk(doc["root"], "")
    for line in missing:
        print(f"no example: {line}")
    print(f"{total - len(missing)} of {total} public items have an example")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "target/doc/redmutex.json"))
