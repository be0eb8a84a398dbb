"""Fetching a model repository from object storage or a web server (``cachefleet fetch-model``).

One module per store (``s3``, ``gcs``, ``https``), each writing objects only through
``paths.inside`` (no key may land outside the target folder), and ``fetch`` to choose the store,
stage the download and put it in place. Every file is created through one ``budget`` (the
bytes a fetch may write, ``--max-bytes``); ``archives`` checks each member itself; ``redirects``
keeps an https download on https. Failures are ``FetchError``: the URI and the reason in one
line, which the init container leaves as its termination message.
"""
