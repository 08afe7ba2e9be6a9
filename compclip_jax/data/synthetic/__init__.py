"""The synthetic world (the demo's data, and :runlocal's): `scenes` draws scenes, renders their images and writes
captions; `world` serves it as a training source; `benchmarks` writes its held-out benchmarks in the real formats;
`tokenizer` trains the SentencePiece model of its fixed vocabulary. It sits below the trainer (data.source="synthetic"),
so the library can run without the demo."""
