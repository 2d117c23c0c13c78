//! Connecting to PostgreSQL the way a cron job needs to: never hang (connect, statement, lock and
//! TCP timeouts), TLS when the URL asks for it, the password from the URL, `PGPASSWORD` or the
//! password file, and errors that name the server and the cause but never the password.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use postgres::config::Host;
use postgres::error::SqlState;
use postgres::{Client, Config};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{self, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::pgpass;
use crate::exit::Failure;

/// How long connecting may take when the URL does not say (`connect_timeout=SECONDS`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a statement waits for a row lock another runner holds before giving up (exit 5),
/// like SQLite's busy timeout.
pub const LOCK_TIMEOUT: Duration = crate::store::sqlite::BUSY_TIMEOUT;
/// The longest any one statement may run: the runner's statements are short; one that is not
/// is stuck, and a cron job must not hang on it.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// A transaction left idle this long (its runner hung mid-transaction) is ended by the server,
/// so its row locks do not block every other host.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long unacknowledged data may sit on the socket before the connection counts as dead:
/// without it, a server that vanished (a host that went down, a cable) makes a write wait for
/// the kernel's retransmission limit, about 15 minutes.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// Where Debian's server listens when the URL names no host (libpq's default too).
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// Which server and database a connection is to, for messages (never with the password), for the
/// password file, and for the marker that names this database on a job's processes.
#[derive(Debug, Clone)]
pub struct Server {
    /// `host:port`, or the socket directory.
    pub address: String,
    pub database: String,
    pub user: String,
}

impl Server {
    /// `postgres://user@host:port/database`: what names this database (no password).
    pub fn identity(&self) -> String {
        format!(
            "postgres://{}@{}/{}",
            self.user, self.address, self.database
        )
    }
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PostgreSQL at {} (database {}, user {})",
            self.address, self.database, self.user
        )
    }
}

/// How much of the server's certificate to check, from `sslmode` (libpq's meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    /// `disable`, `prefer`, `require`: encrypt (if asked) but check nothing, as libpq does.
    Nothing,
    /// `verify-ca`: the certificate chains to a trusted root.
    Chain,
    /// `verify-full`: that, and it names the host connected to.
    ChainAndHost,
}

/// Which plans the server may choose for this session's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plans {
    /// The server's choice: for the reading commands, whose queries may span the history.
    Any,
    /// A tick's (and `run --wait`'s) statements each touch a few runs through the index made
    /// for them, in its order, and stop at their `LIMIT`. Their row estimates are often wrong:
    /// a backlog of pending runs appears within a minute (10,000 schedules due at midnight),
    /// long before autovacuum analyzes `job_runs` again. Believing there are a handful of due
    /// runs, the planner chose a bitmap scan of the whole due index and a sort, read every
    /// pending run at each claim, and a drain of N runs cost N x N (measured with 5,000 due:
    /// one claim of 2 runs read 10,010 index entries, 15 since). A bitmap scan also never
    /// marks the index entries of dead row versions, which pile up in the partial indexes of
    /// running runs until a vacuum. So bitmap scans are off for these sessions.
    Indexed,
}

/// How long a session may wait, and whether it may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// A command's: the timeouts above, or the URL's.
    Work,
    /// A glance while someone types (shell completion, `OpenMode::Peek`): connecting and each
    /// statement get `GLANCE_TIMEOUT` at most whatever the URL says, and the session is read-only.
    Glance,
}

/// The longest a glance (`Patience::Glance`) waits to connect, or for a statement.
pub const GLANCE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connect to the database at `url` (`shown`: the URL with its password masked).
pub fn connect(
    url: &str,
    shown: &str,
    plans: Plans,
    patience: Patience,
) -> Result<(Client, Server)> {
    let (config, verify) = parse(url, shown)?;
    let (mut config, server) = complete(config, plans);
    if patience == Patience::Glance {
        glance(&mut config);
    }
    let tls = tls_connector(verify)
        .map_err(|e| Failure::database(format!("{server}: cannot set up TLS: {e}")))?;
    if let Some(password) = password_for(&config, &server) {
        config.password(password);
    }
    let client = connect_within(config, tls, &server)?;
    Ok((client, server))
}

/// The server, database and user `url` names, what it leaves out filled in as `connect` fills it
/// in, without connecting (`shown`: the URL with its password masked, for the error).
pub fn server_of(url: &str, shown: &str) -> Result<Server> {
    let (config, _) = parse(url, shown)?;
    Ok(complete(config, Plans::Any).1)
}

/// Make the connection, giving up after the connect timeout (for each host the URL names, as
/// libpq does). The `postgres` crate's own timeout covers only opening the socket: a server that
/// accepts the connection but never answers the startup (a stopped postmaster, a proxy whose
/// backend is down) held the command forever. The crate offers no way to bound the TLS, startup
/// and authentication exchange, so the whole connect runs on a thread of its own and is
/// abandoned when the time is up: the thread stays blocked on its socket until the process ends,
/// which for a command that cannot connect is at once (a tick that reconnects mid-run carries
/// one idle thread, not a hung job).
fn connect_within(config: Config, tls: MakeRustlsConnect, server: &Server) -> Result<Client> {
    let hosts = config.get_hosts().len().max(1) as u32;
    let limit = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT)
        * hosts;
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-connect".to_string())
        .spawn(move || {
            // The receiver is gone when the time is up: nobody wants the result then.
            let _ = sender.send(config.connect(tls));
        })
        .map_err(|e| anyhow::anyhow!("cannot connect to {server}: cannot start a thread: {e}"))?;
    match receiver.recv_timeout(limit) {
        Ok(connected) => connected.map_err(|e| connect_failure(server, &e)),
        Err(RecvTimeoutError::Timeout) => Err(Failure::database(format!(
            "cannot connect to {server}: timed out after {}s waiting for the server to answer \
             (the connection was accepted but the startup never finished: a stopped server, or a \
             proxy whose server is down); raise connect_timeout=SECONDS in the URL if it is only slow",
            limit.as_secs()
        ))),
        Err(RecvTimeoutError::Disconnected) => Err(anyhow::anyhow!(
            "cannot connect to {server}: the connecting thread ended without a result"
        )),
    }
}

/// Parse the URL. The `postgres` crate knows `sslmode` `disable`, `prefer` and `require`; the
/// verifying modes are taken out here and given to the TLS connector.
fn parse(url: &str, shown: &str) -> Result<(Config, Verify)> {
    // The postgres crate ends the user and password at the first `@`: with an `@` left in the
    // password, the rest of it became the host, and its errors printed that part of the password
    // ("cannot connect to PostgreSQL at cret@db...").
    let authority = url.split_once("://").map_or("", |(_, rest)| {
        rest.split(['/', '?']).next().unwrap_or_default()
    });
    if authority.matches('@').count() > 1 {
        return Err(Failure::usage(format!(
            "{shown} has more than one @ before its host; write an @ in the user name or \
             password as %40"
        )));
    }
    let mut verify = Verify::Nothing;
    let rewritten = match url.split_once('?') {
        None => url.to_string(),
        Some((base, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match verifying_mode(pair) {
                    Some(mode) => {
                        verify = mode;
                        "sslmode=require".to_string()
                    }
                    None => pair.to_string(),
                })
                .collect();
            format!("{base}?{}", pairs.join("&"))
        }
    };
    let config: Config = rewritten.parse().map_err(|e| {
        Failure::usage(format!(
            "{shown} is not a PostgreSQL URL runner can use ({}); use \
             postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=require]",
            url_fault(&rewritten, &e)
        ))
    })?;
    Ok((config, verify))
}

/// The certificate check a URL parameter asks for when it is `sslmode=verify-full` or
/// `sslmode=verify-ca`, its name and value percent-decoded first, as libpq and the postgres crate
/// decode them (`sslmode=verify%2Dfull` is `verify-full`).
fn verifying_mode(parameter: &str) -> Option<Verify> {
    let (name, value) = parameter.split_once('=')?;
    if crate::store::percent_decoded(name) != b"sslmode" {
        return None;
    }
    match crate::store::percent_decoded(value).as_slice() {
        b"verify-full" => Some(Verify::ChainAndHost),
        b"verify-ca" => Some(Verify::Chain),
        _ => None,
    }
}

/// What is wrong with a URL the postgres crate refused (`error`). Its error says only "invalid
/// connection string" (the option at fault, decoded and without its value, only in its source),
/// so the parameter at fault is found by parsing each one alone, and named as written (percent-
/// encoded if it was); its value too when that is what is wrong (never a password's: the crate takes any, and it is masked).
fn url_fault(url: &str, error: &postgres::Error) -> String {
    let parameters = url.split_once('?').map_or("", |(_, query)| query);
    for parameter in parameters.split('&') {
        let Err(alone) = format!("postgres://h?{parameter}").parse::<Config>() else {
            continue;
        };
        let reason = std::error::Error::source(&alone).map_or(String::new(), |s| s.to_string());
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        return if reason.starts_with("unknown option") {
            // libpq's names are lower case, as the crate's are: `PASSWORD=` is no password.
            let hint = match name.eq_ignore_ascii_case("password") {
                true => "; a password is given as password=, in lower case",
                false => "",
            };
            format!("unknown parameter \"{name}\"{hint}")
        } else if reason.starts_with("invalid value") {
            let value = match crate::store::is_password_name(name) {
                true => "***",
                false => value,
            };
            // The name as the crate read it, percent-decoded.
            let values = match crate::store::percent_decoded(name).as_slice() {
                b"sslmode" => ": disable, prefer, require, verify-ca or verify-full",
                _ => "",
            };
            format!("invalid value \"{value}\" for parameter {name}{values}")
        } else {
            format!("parameter \"{name}\": {}", cause(&alone))
        };
    }
    cause(error)
}

/// Fill in what the URL left out the way libpq would (host: the local socket; user: the login
/// name; database: the user's name) and the timeouts a cron job needs.
fn complete(mut config: Config, plans: Plans) -> (Config, Server) {
    if config.get_hosts().is_empty() {
        config.host_path(DEFAULT_SOCKET_DIR);
    }
    let user = match config.get_user() {
        Some(user) => user.to_string(),
        None => {
            let user = std::env::var("PGUSER")
                .ok()
                .filter(|u| !u.is_empty())
                .or_else(login_name)
                .unwrap_or_else(|| "postgres".to_string());
            config.user(&user);
            user
        }
    };
    let database = match config.get_dbname() {
        Some(database) => database.to_string(),
        None => {
            config.dbname(&user);
            user.clone()
        }
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let address = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => format!("{host}:{port}"),
        Some(Host::Unix(dir)) => format!("{}:{port}", dir.display()),
        None => format!("{DEFAULT_SOCKET_DIR}:{port}"),
    };
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    // Keepalives notice a dead server while a tick waits for its jobs with the connection idle.
    config.keepalives_idle(Duration::from_secs(30));
    config.keepalives_interval(Duration::from_secs(10));
    config.keepalives_retries(3);
    if config.get_application_name().is_none() {
        config.application_name("runner");
    }
    let mut settings = format!(
        "-c statement_timeout={}ms -c lock_timeout={}ms -c idle_in_transaction_session_timeout={}ms",
        STATEMENT_TIMEOUT.as_millis(),
        LOCK_TIMEOUT.as_millis(),
        IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
    );
    if plans == Plans::Indexed {
        settings.push_str(" -c enable_bitmapscan=off");
    }
    let options = match config.get_options() {
        Some(given) if !given.is_empty() => format!("{given} {settings}"),
        _ => settings,
    };
    config.options(&options);
    (
        config,
        Server {
            address,
            database,
            user,
        },
    )
}

/// Make a completed configuration a glance's: its timeouts at most `GLANCE_TIMEOUT`, the URL's
/// included, and every transaction read-only (the later `-c` of an option wins).
fn glance(config: &mut Config) {
    if config
        .get_connect_timeout()
        .is_none_or(|given| *given > GLANCE_TIMEOUT)
    {
        config.connect_timeout(GLANCE_TIMEOUT);
    }
    let options = format!(
        "{} -c statement_timeout={}ms -c default_transaction_read_only=on",
        config.get_options().unwrap_or_default(),
        GLANCE_TIMEOUT.as_millis()
    );
    config.options(&options);
}

fn login_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The password: from the URL, else `PGPASSWORD`, else the password file.
fn password_for(config: &Config, server: &Server) -> Option<String> {
    if config.get_password().is_some() {
        return None; // the URL's own
    }
    if let Some(password) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
        return Some(password);
    }
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.as_str(),
        // libpq matches a Unix-socket connection against the host name `localhost`.
        _ => "localhost",
    };
    let target = pgpass::Target {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        database: &server.database,
        user: &server.user,
    };
    pgpass::lookup(&pgpass::default_path()?, &target)
}

/// The TLS side of a connection (rustls, so the binary needs no system OpenSSL and starts
/// faster). `sslmode` `require` (and `prefer`) encrypts without checking the certificate, as
/// libpq does; `verify-ca` checks that it chains to one of the system's trusted roots;
/// `verify-full` checks that and that it names the host.
fn tls_connector(verify: Verify) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let lenient = |chain| {
        Arc::new(Lenient {
            chain,
            provider: provider.clone(),
        })
    };
    let config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(lenient(None)),
        Verify::Chain => builder
            .dangerous()
            .with_custom_certificate_verifier(lenient(Some(system_verifier(provider.clone())?))),
        Verify::ChainAndHost => builder.with_webpki_verifier(system_verifier(provider.clone())?),
    };
    Ok(MakeRustlsConnect::new(config.with_no_client_auth()))
}

/// The standard certificate check against the system's trusted roots (`/etc/ssl/certs`, or
/// `SSL_CERT_FILE` / `SSL_CERT_DIR`, where OpenSSL looks too).
fn system_verifier(provider: Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or(String::new(), |e| format!(": {e}"));
        return Err(format!(
            "no trusted root certificates found on this system{why}"
        ));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())
}

/// The certificate check of `require` (`chain: None`: none, libpq's meaning) and `verify-ca`
/// (the standard check, except that the certificate need not name the host). The handshake's
/// signatures are checked against the certificate either way.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The name is checked last, once the chain is known good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A connection that could not be made: exit 4 (unreachable, refused, no such database, bad
/// password), or 5 when the server is only too busy to take it now.
fn connect_failure(server: &Server, error: &postgres::Error) -> anyhow::Error {
    let cause = cause(error);
    if error.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) {
        return Failure::Busy(format!(
            "{server} refused the connection: {cause}; it is safe to retry"
        ))
        .into();
    }
    if is_password_missing(error) {
        let file = pgpass::default_path()
            .map_or_else(|| "~/.pgpass".to_string(), |p| p.display().to_string());
        return Failure::database(format!(
            "cannot connect to {server}: the server asks for a password, and none was found in \
             the URL, PGPASSWORD or the password file ({file})"
        ));
    }
    let hint = match error.code() {
        Some(&SqlState::INVALID_PASSWORD)
        | Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION) => {
            "; check the user and the password (in the URL, PGPASSWORD or ~/.pgpass)"
        }
        Some(&SqlState::INVALID_CATALOG_NAME) => "; create the database first (createdb)",
        _ => "",
    };
    Failure::database(format!("cannot connect to {server}: {cause}{hint}"))
}

/// Whether the server asked for a password and the connection had none: the postgres crate says
/// only "invalid configuration: password missing" (its error has no kind to match), which names
/// none of the places a password comes from.
fn is_password_missing(error: &postgres::Error) -> bool {
    error.code().is_none()
        && std::error::Error::source(error).is_some_and(|s| s.to_string() == "password missing")
}

/// What went wrong, in one line: the server's own message, else the client's error and its
/// causes (`connection refused`, `timeout`). Never holds the password: neither does.
pub fn cause(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    // A TLS stream cut short says so at length, with a link to the TLS library's manual.
    let io = source.and_then(|s| s.downcast_ref::<std::io::Error>());
    if io.is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof) {
        return format!("{text}: the server closed the connection");
    }
    while let Some(inner) = source {
        let shown = inner.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = inner.source();
    }
    text
}

/// Exit 4: the connection was lost in the middle of the command.
fn connection_lost(server: &Server, cause: &str) -> anyhow::Error {
    Failure::ConnectionLost(format!("lost the connection to {server}: {cause}")).into()
}

/// A lost connection found before anything was sent, that could not be made again (`error`:
/// why connecting failed): exit 4, as when the command could not connect at all, and reported as
/// the loss it is: `farewell`, how the server ended the session, when a probe found it.
pub fn server_away(server: &Server, farewell: Option<&str>, error: anyhow::Error) -> anyhow::Error {
    let message = match farewell {
        Some(cause) => format!("lost the connection to {server}: {cause}"),
        None => format!("lost the connection, and {error:#}"),
    };
    Failure::ServerAway(message).into()
}

/// Whether the client's error came from its socket, not from the server or a conversion.
fn is_io(error: &postgres::Error) -> bool {
    std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>())
}

/// An error met while working: busy (exit 5, safe to retry) when a lock or the statement timed
/// out or a transaction lost a race it cannot win; a database problem (exit 4) when this user may
/// not do this or the database is read-only, or when the connection was lost (the server shut
/// down or restarted, the session was terminated, the socket failed); otherwise the cause with
/// the server named (exit 1: a constraint the runner did not expect).
pub fn failure(server: &Server, error: &postgres::Error) -> anyhow::Error {
    let cause = cause(error);
    let busy = [
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::QUERY_CANCELED,
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::TOO_MANY_CONNECTIONS,
    ];
    match error.code() {
        Some(code) if busy.contains(code) => Failure::Busy(format!(
            "{server} is busy: {cause} (waited up to {}s); it is safe to retry",
            LOCK_TIMEOUT.as_secs()
        ))
        .into(),
        // Like a read-only SQLite file: the database is there, this user may not do this.
        Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Failure::database(format!(
            "{server}: {cause}; grant this user the runner tables' privileges, or connect as their owner"
        )),
        // Like a read-only SQLite file: a standby, or a database (or user) whose transactions
        // are read-only by default. Reading works; this command must write.
        Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => Failure::database(format!(
            "{server} is read-only ({cause}): reading works, but this command must write; point \
             --db at the primary server, or turn default_transaction_read_only off for this \
             database and user"
        )),
        // The server ended the session: shut down, restarted, or an administrator.
        Some(&SqlState::ADMIN_SHUTDOWN)
        | Some(&SqlState::CRASH_SHUTDOWN)
        | Some(&SqlState::CANNOT_CONNECT_NOW) => connection_lost(server, &cause),
        // The connection closed, or its socket failed (reset, the TCP user timeout, a TLS
        // stream cut short).
        _ if error.is_closed() || is_io(error) => connection_lost(server, &cause),
        _ => anyhow::anyhow!("{server}: {cause}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_ssl_modes_are_taken_out_of_the_url() {
        let (config, verify) = parse(
            "postgres://u@h/d?sslmode=verify-full&connect_timeout=3",
            "x",
        )
        .expect("parse");
        assert_eq!(verify, Verify::ChainAndHost);
        assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Require);
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        let (_, verify) = parse("postgres://u@h/d?sslmode=verify-ca", "x").expect("parse");
        assert_eq!(verify, Verify::Chain);
        let (config, verify) = parse("postgres://u@h/d?sslmode=require", "x").expect("parse");
        assert_eq!(verify, Verify::Nothing);
        assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Require);
    }

    #[test]
    fn parameters_are_percent_decoded_before_they_are_read_as_libpq_reads_them() {
        for url in [
            "postgres://u@h/d?sslmode=verify%2Dfull",
            "postgres://u@h/d?sslmode=verify%2dfull",
            "postgres://u@h/d?ssl%6Dode=%76erify-full&connect_timeout=3",
        ] {
            let (config, verify) = parse(url, "x").expect(url);
            assert_eq!(verify, Verify::ChainAndHost, "{url}");
            assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Require);
        }
        let (_, verify) = parse("postgres://u@h/d?sslmode=verify%2Dca", "x").expect("parse");
        assert_eq!(verify, Verify::Chain);
        // A `%` not followed by two hex digits is no escape: the value stays refused.
        let error = parse("postgres://u@h/d?sslmode=verify%2-full", "x").expect_err("refused");
        assert!(
            format!("{error:#}").contains("invalid value \"verify%2-full\" for parameter sslmode"),
            "{error:#}"
        );
        // A refused value is named as written, encoded, with the values its parameter takes.
        let error = parse("postgres://u@h/d?ssl%6Dode=verify%2Dnone", "x").expect_err("refused");
        assert!(
            format!("{error:#}").contains(
                "(invalid value \"verify%2Dnone\" for parameter ssl%6Dode: disable, prefer, \
                 require, verify-ca or verify-full)"
            ),
            "{error:#}"
        );
    }

    #[test]
    fn a_bad_url_is_a_usage_error_that_does_not_echo_the_password() {
        let error = parse(
            "postgres://u:s3cret@h/d?sslmode=sometimes",
            "postgres://u:***@h/d",
        )
        .expect_err("refused");
        assert_eq!(crate::exit::code_for(&error), crate::exit::USAGE);
        assert!(!format!("{error:#}").contains("s3cret"), "{error:#}");
    }

    #[test]
    fn a_bad_parameter_is_named_with_its_value_never_a_passwords() {
        let refused = |url: &str| {
            let error = parse(url, &crate::store::masked_url(url)).expect_err(url);
            assert_eq!(crate::exit::code_for(&error), crate::exit::USAGE);
            format!("{error:#}")
        };
        let message = refused("postgres://u@h/d?connect_timeout=3&sslmode=bogus");
        assert!(
            message.contains(
                "(invalid value \"bogus\" for parameter sslmode: disable, prefer, require, \
                 verify-ca or verify-full)"
            ),
            "{message}"
        );
        let message = refused("postgres://u@h/d?bogus=1&sslmode=require");
        assert!(
            message.contains("(unknown parameter \"bogus\")"),
            "{message}"
        );
        // libpq and the postgres crate take the name `password` only in lower case (percent-
        // encoded or not): `PASSWORD=` is refused, its value masked like an accepted one.
        let message = refused("postgres://u@h/d?PASSWORD=s3cret");
        assert!(
            message.contains(
                "(unknown parameter \"PASSWORD\"; a password is given as password=, in lower case)"
            ),
            "{message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
        let (config, _) = parse("postgres://u@h/d?pass%77ord=s3cret", "x").expect("parse");
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        let message = refused("postgres://u@h/d?connect_timeout=soon");
        assert!(
            message.contains("(invalid value \"soon\" for parameter connect_timeout)"),
            "{message}"
        );
    }

    #[test]
    fn an_at_sign_left_in_the_password_is_refused_without_showing_it() {
        let error = parse(
            "postgres://u:se@cret@127.0.0.1:1/d",
            "postgres://u:***@127.0.0.1:1/d",
        )
        .expect_err("refused");
        assert_eq!(crate::exit::code_for(&error), crate::exit::USAGE);
        let message = format!("{error:#}");
        assert!(message.contains("write an @ in the user name or password as %40"));
        assert!(!message.contains("cret"), "{message}");
        // Written as %40 it is one password, and an @ after the host is the path's or a
        // parameter's.
        let (config, _) =
            parse("postgres://u:se%40cret@h/d?application_name=a@b", "x").expect("parse");
        assert_eq!(config.get_password(), Some(&b"se@cret"[..]));
        assert_eq!(config.get_hosts().len(), 1);
    }

    #[test]
    fn a_glance_waits_two_seconds_at_most_and_writes_nothing() {
        for url in [
            "postgres://app@db/x",
            "postgres://app@db/x?connect_timeout=30",
        ] {
            let (config, _) = parse(url, "x").expect("parse");
            let (mut config, _) = complete(config, Plans::Any);
            glance(&mut config);
            assert_eq!(config.get_connect_timeout(), Some(&GLANCE_TIMEOUT), "{url}");
            let options = config.get_options().expect("options");
            // The later setting of a name wins.
            assert!(
                options
                    .ends_with(" -c statement_timeout=2000ms -c default_transaction_read_only=on"),
                "{options}"
            );
        }
        let (config, _) = parse("postgres://app@db/x?connect_timeout=1", "x").expect("parse");
        let (mut config, _) = complete(config, Plans::Any);
        glance(&mut config);
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(1)));
    }

    #[test]
    fn what_the_url_leaves_out_is_filled_in_with_timeouts() {
        let (config, _) = parse("postgres://app@db.example/runner", "x").expect("parse");
        let (config, server) = complete(config, Plans::Any);
        assert_eq!(server.address, "db.example:5432");
        assert_eq!(server.identity(), "postgres://app@db.example:5432/runner");
        assert_eq!(config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        let options = config.get_options().expect("options");
        assert!(options.contains("statement_timeout="), "{options}");
        assert!(options.contains("lock_timeout=15000ms"), "{options}");
        assert!(!options.contains("enable_bitmapscan"), "{options}");
        let (config, _) =
            parse("postgres://app@db/x?options=-c%20search_path%3Drunner", "x").expect("parse");
        let (config, _) = complete(config, Plans::Indexed);
        let options = config.get_options().expect("options");
        assert!(
            options.starts_with("-c search_path=runner -c statement_timeout"),
            "{options}"
        );
        assert!(options.ends_with(" -c enable_bitmapscan=off"), "{options}");
    }
}
