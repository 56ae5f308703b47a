"""What passes between the runner's processes through the state store, as typed, versioned documents.

Each document has one model and exactly one writer and one reader function, in the module named for
it; nothing else parses these files:

- ``status.py``   ``status/<name>.json``: a job's (or session query's) state and its latest micro-batches
- ``control.py``  ``control/<name>/{stop,stopped,start,started}.json`` and ``session/{stop,stopped}.json``:
                  requests to stop or start, and their answers
- ``history.py``  ``history/<name>/<timestamp>.json``: one entry per decision or event
- ``session.py``  ``session/{health,held,control}.json``: the session application's health, its held
                  queries and where its control endpoint listens
- ``jobspec.py``  ``specs/<name>/<run-id>.json``: what the runner hands a job (its command line names the key)
- ``deployed.py`` ``deployed/<name>.yaml``: what is deployed under a name (merged manifest, tables, run)
- ``session_config.py`` what ``session start`` hands the session application on its command line
- ``preview.py``  a live preview asked of the session's control endpoint, and its answer
- ``ownership.py`` ``locks/``, ``deploy-requests/`` and ``jobs/``: who holds a deploy, claimed an S3 change
                  or started a job

``control.py`` also has ``errors/<name>.json``, why a pushed manifest was not deployed.

The pydantic documents (``document.Document``) carry ``schema`` (``document.SCHEMA``). One without it
was written by the release before these models; its keys are the same, so it reads as schema 0 (only
``held.json`` had another shape, converted on reading). Readers ignore keys they do not know, so a
document written by a later release still reads. The job spec, the deployed record and the session's
configuration are frozen dataclasses with their own ``to_json``/``from_json`` (the record also reads
the block YAML earlier runners wrote).
"""
