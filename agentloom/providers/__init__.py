"""Provider adapters: guarded HTTP, model discovery, the model manifest, chat gateways."""
