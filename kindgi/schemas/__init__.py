"""Marshmallow schemas: what a request may say and what a response says, one module per
capability as the service has.

Each request body has one schema, used alike for JSON and for the HTML forms; the same schemas
generate the OpenAPI document. Schemas check shape and limits; rules that need the database
(does the run exist, does a pointer resolve) are the service's.

- `common`: the fields, the bases of bodies and query strings (and their guard against text no
  database can store), paging, the error envelope, `load` and `dump`
- `counts`: the test set's counts
- `cases`: the cases list and its filters, export, retiring and restoring, a case as answered
- `search`: the list's words to search for, and a word as the indexes cut text
- `corrections`: corrections and hand cases, and what a case expects
- `runs`: recording runs and their list
- `identity`: personal tokens
- `test_runs`: test runs, their results and comparisons, and the test set's versions
"""
