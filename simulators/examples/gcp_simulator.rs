//! Runs the GCP simulator by hand, to try the `gcp` plugin against it with `bulkhead plugin
//! call`. It makes a throwaway service account, writes its private key to a file and prints
//! the settings to use, then serves until Ctrl-C.
//!
//! ```sh
//! cargo run -p bulkhead-simulators --example gcp_simulator -- [LISTEN] [PROJECT] [KEY_FILE]
//! # defaults: 127.0.0.1:0, sim-project, ./gcp-sim-key.pem
//! ```

use bulkhead_simulators::gcp::{GcpSimulator, service_account_generate};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    let project = args.next().unwrap_or_else(|| "sim-project".into());
    let key_file = args.next().unwrap_or_else(|| "gcp-sim-key.pem".into());
    let client_email = format!("bulkhead@{project}.iam.gserviceaccount.com");

    let (account, private_key) = service_account_generate(&client_email);
    std::fs::write(&key_file, private_key)?;
    let sim = GcpSimulator::start(listen, &project, account).await?;
    let url = sim.url();
    println!("GCP simulator of project {project} at {url}");
    println!("  --config project={project} --config compute_endpoint={url}");
    println!(
        "  --config token_uri={} --config regions=us-central1-a",
        sim.token_url()
    );
    println!("  --secret client_email={client_email} --secret private_key=\"$(cat {key_file})\"");
    println!("  --allow-host {}", sim.server.addr);
    println!(
        "faults: curl -X PUT {url}/_sim/faults -H 'content-type: application/json' -d '{{\"suspended\":true}}'"
    );
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await?;
    Ok(())
}
