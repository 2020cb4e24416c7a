//! The local platform: `dev` runs a control plane with the bundled providers, a host agent and
//! the cloud simulators, all configured to use each other, and prints how to try it; `hello` is
//! the tiny demo workload. For a developer's machine, never the production shape.

use bulkhead::config::{LogFormat, ServeArgs, Settings};
use bulkhead::dev::DevPlatform;

use bulkhead_common::process::{logging_init, shutdown_signal};

#[derive(clap::Args)]
pub struct DevArgs {
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(clap::Args)]
pub struct HelloArgs {
    #[arg(long, env = "PORT", default_value_t = 8080)]
    port: u16,
    #[arg(long, env = "BULKHEAD_INSTANCE_KEY", default_value = "hello")]
    name: String,
}

pub async fn dev(DevArgs { mut serve }: DevArgs) -> anyhow::Result<()> {
    serve.data_dir.get_or_insert_with(|| "data/dev".into());
    let mut settings = Settings::resolve(serve)?;
    settings.bundled_plugins = crate::bundled_plugins();
    // The administrator signs in to the dashboard with a password: on a first start without
    // BULKHEAD_BOOTSTRAP_PASSWORD, a generated one, shown once below.
    let generated_password = settings.bootstrap_password.is_none().then(|| {
        let password = format!("bh-{}", uuid::Uuid::new_v4().simple());
        settings.bootstrap_password = Some(password.clone().into());
        password
    });
    logging_init(settings.log_format == LogFormat::Json);
    let stop = shutdown_signal()?;
    data_dir_private(&settings.data_dir)?;
    let platform = DevPlatform::start(&settings.data_dir).await?;
    // Domains are verified against the platform's DNS server, unless told otherwise.
    settings.dns_resolver.get_or_insert(platform.dns.dns_addr);
    let server = bulkhead::server::start(settings).await?;
    platform.providers_configure(&server.app).await?;
    let sign_in = match (server.first_start, generated_password) {
        (true, Some(password)) => format!("password {password} (shown only now)"),
        (true, None) => "the password in BULKHEAD_BOOTSTRAP_PASSWORD".to_owned(),
        (false, _) => "the password shown on the first start".to_owned(),
    };
    dev_guide(&server, &platform, &sign_in);
    stop.await;
    tracing::info!("shutting down the local platform");
    server.shutdown().await?;
    platform.shutdown().await;
    Ok(())
}

pub async fn hello(HelloArgs { port, name }: HelloArgs) -> anyhow::Result<()> {
    bulkhead::dev::hello_serve(port, name).await
}

/// What `bulkhead dev` prints once everything runs: where things are, and how to try them.
fn dev_guide(server: &bulkhead::server::RunningServer, platform: &DevPlatform, sign_in: &str) {
    let hello = std::env::current_exe()
        .map(|exe| format!("{} hello", exe.display()))
        .unwrap_or_else(|_| "bulkhead hello".into());
    println!(
        r#"bulkhead listening on http://{addr}

Open the dashboard: http://{addr}/
  sign in as {admin} with {sign_in}

A local platform is running:
  control plane   http://{addr}   (API reference: http://{addr}/docs/)
  gcp simulator   {gcp}   (faults: PUT {gcp}/_sim/faults '{{"suspended":true}}')
  aws simulator   {aws}
  host agent      {agent}
                  {isolation}
  DNS server      {dns} (udp), records: PUT {dns_api}/records/<name> '{{"txt":["…"]}}'
The providers gcp, aws and metal use them. With A="Authorization: Bearer <admin token>"
(BULKHEAD_BOOTSTRAP_TOKEN, or the token printed above on a first start):

  curl -s -H "$A" http://{addr}/v1/providers | jq '.items[] | {{name, state}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/gcp/instances -d '{{"instance_key":"web-1","region":"{zone}","artifact":"shop/web:1","port":8080}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/aws/instances -d '{{"instance_key":"web-1","region":"{region}","artifact":"ami-0bulkhead","port":8080}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/metal/instances -d '{{"instance_key":"web-1","region":"local","artifact":"{hello}","port":8080}}'
  curl -s http://<the "address" of an answer>/        # the instance's own answer

Deploy a service of 3 replicas over the three (more in docs/api/deploying.md):

  B=http://{addr}; J='Content-Type: application/json'
  P=$(curl -s -H "$A" -H "$J" $B/v1/projects -d '{{"name":"demo"}}' | jq -r .id)
  E=$(curl -s -H "$A" -H "$J" $B/v1/projects/$P/environments -d '{{"name":"production"}}' | jq -r .id)
  S=$(curl -s -H "$A" -H "$J" $B/v1/projects/$P/services -d '{{"environment_id":"'$E'","name":"web","port":8080,"replicas":3,"source":{{"type":"command","command":["python3","-m","http.server","$PORT"]}},"placement":{{"providers":[{{"name":"gcp"}},{{"name":"aws"}},{{"name":"metal"}}]}}}}' | jq -r .id)
  D=$(curl -s -H "$A" -X POST $B/v1/projects/$P/services/$S/deployments | jq -r .id)
  curl -sN -H "$A" -H 'Accept: text/event-stream' $B/v1/projects/$P/services/$S/deployments/$D/events
  curl -s -H "$A" $B/v1/projects/$P/services/$S/instances | jq '.items[] | {{provider, address, health}}'

Give it a domain: publish the domain's challenge on the DNS server above, verify, and it routes:

  M=$(curl -s -H "$A" -H "$J" $B/v1/projects/$P/domains -d '{{"hostname":"web.demo.test","service_id":"'$S'"}}')
  curl -s -X PUT {dns_api}/records/$(echo "$M" | jq -r .challenge.name) -d '{{"txt":["'$(echo "$M" | jq -r .challenge.value)'"]}}' -H "$J"
  curl -s -H "$A" -X POST $B/v1/projects/$P/domains/$(echo "$M" | jq -r .id)/verify | jq .status
  curl -s -H "$A" $B/v1/routing-table | jq '.table.routes[] | {{domain, upstreams: [.upstreams[].address]}}'

Stop with Ctrl-C (the agent's workloads are stopped too)."#,
        addr = server.addr,
        admin = server.app.settings.admin_email,
        gcp = platform.gcp.url(),
        aws = platform.aws.url(),
        agent = platform.agent.url(),
        isolation = platform.agent_isolation_note(),
        dns = platform.dns.dns_addr,
        dns_api = platform.dns.api.url(),
        zone = bulkhead::dev::GCP_ZONE,
        region = bulkhead::dev::AWS_REGION,
    );
}

/// Creates the data directory so that only its owner may list or read it (0711), or makes it
/// so if an earlier version or a hand made it 0755: it holds the master key, the database and
/// the agent's state, and a viewer of the machine could otherwise read what they hold (webhook
/// URLs carry a secret in their path). Others may still pass through it: the host agent's
/// workloads, each a user of its own, reach their working directories below it (the files
/// themselves are 0600, their directories 0700).
fn data_dir_private(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    const MODE: u32 = 0o711;
    std::fs::create_dir_all(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(MODE))?;
        tracing::info!(dir = %dir.display(), was = format!("{mode:o}"), "made the data directory 0711: its owner alone may list or read it");
    }
    Ok(())
}
