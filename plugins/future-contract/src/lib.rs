//! Exports `bulkhead:provider/adapter@0.8.0`, a version this host does not support yet.

wit_bindgen::generate!({
    inline: "
        package bulkhead:provider@0.8.0;

        interface adapter {
            ping: func() -> string;
        }

        world provider {
            export adapter;
        }
    ",
    world: "provider",
});

struct Future;

impl exports::bulkhead::provider::adapter::Guest for Future {
    fn ping() -> String {
        "from the future".into()
    }
}

export!(Future);
