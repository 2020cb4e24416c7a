//! The agent as a command (`bulkhead-agent`, also `bulkhead agent`): its flags and its life as a
//! process, until SIGINT or SIGTERM.

use bulkhead_common::process::{logging_init, shutdown_signal};

#[derive(clap::Args)]
pub struct AgentArgs {
    /// Address to listen on.
    #[arg(long, env = "BULKHEAD_AGENT_LISTEN", default_value = "127.0.0.1:7070")]
    listen: std::net::SocketAddr,
    /// Where the agent keeps its state and its workloads' logs.
    #[arg(long, env = "BULKHEAD_AGENT_DATA_DIR", default_value = "data/agent")]
    data_dir: std::path::PathBuf,
    /// Workloads this machine may run at once.
    #[arg(long, env = "BULKHEAD_AGENT_SLOTS", default_value_t = crate::DEFAULT_SLOTS)]
    slots: u32,
    /// The CPU, in thousandths of a core, that the sizes of this machine's workloads may add
    /// up to (default: 1000 for each CPU the agent may run on). A workload that does not fit
    /// in what is left is refused, and waits at the control plane for room.
    #[arg(long, env = "BULKHEAD_AGENT_CPU_MILLIS")]
    cpu_millis: Option<u32>,
    /// The memory, in MiB, that the sizes of this machine's workloads may add up to (default:
    /// the machine's, less a tenth kept for the system and the agent, 256 MiB to 2 GiB).
    #[arg(long, env = "BULKHEAD_AGENT_MEMORY_MIB")]
    memory_mib: Option<u32>,
    /// Host name or IP put in workload addresses (how the platform reaches this machine).
    #[arg(long, env = "BULKHEAD_AGENT_ADVERTISE_HOST", default_value = crate::DEFAULT_ADVERTISE_HOST)]
    advertise_host: String,
    /// A file holding the agent's token (16+ characters), owned by the agent's user and
    /// readable by it alone (mode 0600); any other file is refused.
    #[arg(long, env = "BULKHEAD_AGENT_TOKEN_FILE")]
    token_file: std::path::PathBuf,
    /// The uids the workloads run as, FIRST-LAST, one per workload (at least as many as the
    /// slots). No account of the machine, and no other agent, may use them.
    #[arg(long, env = "BULKHEAD_AGENT_WORKLOAD_UIDS", default_value_t = crate::DEFAULT_WORKLOAD_UIDS)]
    workload_uids: crate::UidRange,
    /// When the agent is not root (and so cannot run workloads as users of their own), run
    /// them as its own user instead of refusing to start. INSECURE: a workload can then read
    /// the agent's token, its state (every workload's environment, secrets included) and the
    /// other workloads' logs. For a developer's machine only.
    #[arg(long)]
    insecure_same_user: bool,
    /// When this machine lacks what workloads' network namespaces need (`ip` from iproute2,
    /// `nft` from nftables), let the workloads share the host's network instead of refusing to
    /// start. INSECURE: workloads can then reach each other, and every service of the host,
    /// over loopback. For a developer's machine only.
    #[arg(long)]
    insecure_shared_network: bool,
    /// When this machine does not let the agent make cgroups (the `memory`, `cpu` and `pids`
    /// controllers under /sys/fs/cgroup), run workloads without holding them to their sizes
    /// instead of refusing to start. INSECURE: one workload can then take the memory, CPU and
    /// process table of the whole machine, and every other workload with it. For a
    /// developer's machine only.
    #[arg(long)]
    insecure_no_limits: bool,
    /// Serve the API over HTTPS with this PEM certificate chain (with --tls-key), re-read when
    /// the files change. The `metal` provider pins it (its SHA-256 in the provider's settings).
    #[arg(long = "tls-cert", env = "BULKHEAD_AGENT_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long = "tls-key", env = "BULKHEAD_AGENT_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    bulkhead_common::tls::crypto_provider_install();
    logging_init(false);
    // The token is a secret: from a private file, never a flag (every user sees a process's
    // command line) nor the environment.
    anyhow::ensure!(
        std::env::var_os("BULKHEAD_AGENT_TOKEN").is_none(),
        "BULKHEAD_AGENT_TOKEN is no longer read: put the token in a file only the agent's user \
         can read (chmod 600), pass it as --token-file (or BULKHEAD_AGENT_TOKEN_FILE), and unset \
         BULKHEAD_AGENT_TOKEN"
    );
    let token =
        bulkhead_common::secret_file::token_file_read(&args.token_file, "the agent's token")?;
    let mut settings = crate::AgentSettings::new(args.listen, args.data_dir, token);
    settings.slots = args.slots;
    settings.cpu_millis = args.cpu_millis;
    settings.memory_mib = args.memory_mib;
    settings.advertise_host = args.advertise_host;
    settings.workload_uids = args.workload_uids;
    settings.insecure_same_user = args.insecure_same_user;
    settings.insecure_shared_network = args.insecure_shared_network;
    settings.insecure_no_limits = args.insecure_no_limits;
    settings.tls = crate::ServerTls::from_flags(args.tls_cert, args.tls_key)?;
    let stop = shutdown_signal()?;
    let agent = crate::start(settings).await?;
    println!("bulkhead agent listening on {}", agent.url());
    println!(
        "workloads: {}; {}; {}",
        agent.isolation, agent.network, agent.limits
    );
    println!("workloads' sizes may add up to {}", agent.allocatable);
    stop.await;
    // Workloads keep running: the next agent on this data directory adopts them.
    agent.shutdown().await;
    Ok(())
}
