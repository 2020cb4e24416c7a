//! A component of the `wasi:cli/command` world: valid WebAssembly, wrong world.

fn main() {
    println!("I am not a provider");
}
