"""What passes between the runner's processes through the state store, as typed, versioned documents.

Each document has one model and exactly one writer and one reader function, in the module named for
it; nothing else parses these files:

- ``status.py``   ``status/<name>.json``: a job's (or session query's) state and its latest micro-batches
- ``control.py``  ``control/<name>/{stop,stopped,start,started}.json`` and ``session/{stop,stopped}.json``:
                  requests to stop or start, and their answers
- ``history.py``  ``history/<name>/<timestamp>.json``: one entry per decision or event
- ``planned.py``  a planned action: one manifest's decision as ``plan --json`` prints it, the console shows
                  it and the history records it
- ``session.py``  ``session/{health,held,control}.json``: the session application's health, its held
                  queries and where its control endpoint listens
- ``jobspec.py``  ``specs/<name>/<run-id>.json``: what the runner hands a job (its command line names the key)
- ``launch.py``   ``launches/<name>/<launch-id>/{verdict,release}.json``: a job judging its own manifest, and
                  the runner's answer
- ``deployed.py`` ``deployed/<name>.yaml``: what is deployed under a name (merged manifest, tables, run)
- ``session_config.py`` what ``session start`` hands the session application on its command line
- ``preview.py``  a live preview asked of the session's control endpoint, and its answer
- ``ownership.py`` ``locks/``, ``deploy-requests/`` and ``jobs/``: who holds a deploy, claimed an S3 change
                  or started a job
- ``console.py``  ``console/access.json``: the console's tokens (as digests)

``control.py`` also has ``errors/<name>.json``, why a pushed manifest was not deployed.

Every document is a ``document.Document``, made of ``runner/core/part.py``'s parts, and so are the core's
types that travel inside them (tables, problems, reasons, query diffs, source starts, bucket addresses):
kebab-case keys, one encoding (``encode``/``decode``), no hand-written conversion. A document carries
``schema`` (``document.SCHEMA``); one without it was written by a release before its model, and reads as
schema 0: its keys were the same, or spelt as the fields (``run_id``, ``primary_key``), which read too (only
``held.json`` had another shape, converted on reading). Readers ignore keys they do not know, so a document
written by a later release still reads.
"""
