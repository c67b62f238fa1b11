//! The operator's commands on accounts and tokens (`account create|list`,
//! `token create|list|revoke`) and demo mode's accounts at start-up. Output
//! is tab-separated with a header line; a new token is always the last line
//! of stdout, shown once.

use idemkey::duration::rfc3339;
use idemkey_server::auth::NewToken;
use idemkey_server::config::{AccountCommand, TokenCommand};
use idemkey_server::db::{AccountId, AccountSummary, Db, DemoAccount, Revocation, TokenId};
use idemkey_server::routes::DemoAccounts;
use tracing::info;

use crate::open::{cli_settings, open_store};

/// The names of demo mode's accounts, by slot (the slot, not the name, is
/// how they are found again).
const DEMO_ACCOUNTS: [(i16, &str); 2] = [(1, "demo"), (2, "demo-b")];

/// Runs an `account` subcommand.
pub async fn account(command: AccountCommand) -> Result<(), String> {
    match command {
        AccountCommand::Create { name, database } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let token = new_token()?;
            let account = store
                .create_account(&name, token.hash())
                .await
                .map_err(|e| format!("cannot create the account: {e}"))?;
            println!("account {} created: {name}", account.0);
            println!("{}", token.reveal());
        }
        AccountCommand::List { database } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let accounts = store
                .list_accounts()
                .await
                .map_err(|e| format!("cannot list the accounts: {e}"))?;
            println!("ID\tCREATED\tTOKENS\tKIND\tNAME");
            for a in accounts {
                let kind = if a.demo { "demo" } else { "account" };
                println!(
                    "{}\t{}\t{}\t{kind}\t{}",
                    a.id.0,
                    rfc3339(a.created_at),
                    a.active_tokens,
                    a.name
                );
            }
        }
    }
    Ok(())
}

/// Runs a `token` subcommand.
pub async fn token(command: TokenCommand) -> Result<(), String> {
    match command {
        TokenCommand::Create { account, database } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let account = resolve(&store, &account).await?;
            let token = new_token()?;
            let id = store
                .create_token(account.id, token.hash())
                .await
                .map_err(|e| format!("cannot create the token: {e}"))?
                .ok_or_else(|| format!("account {} no longer exists", account.id.0))?;
            println!(
                "token {} created for account {} ({})",
                id.0, account.id.0, account.name
            );
            println!("{}", token.reveal());
        }
        TokenCommand::List { account, database } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let account = resolve(&store, &account).await?;
            let tokens = store
                .list_tokens(account.id)
                .await
                .map_err(|e| format!("cannot list the tokens: {e}"))?;
            println!("ID\tCREATED\tLAST_USED\tREVOKED");
            let time = |t: Option<_>| t.map_or_else(|| "-".to_owned(), rfc3339);
            for t in tokens {
                println!(
                    "{}\t{}\t{}\t{}",
                    t.id.0,
                    rfc3339(t.created_at),
                    time(t.last_used_at),
                    time(t.revoked_at)
                );
            }
        }
        TokenCommand::Revoke { id, database } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            match store
                .revoke_token(TokenId(id))
                .await
                .map_err(|e| format!("cannot revoke the token: {e}"))?
            {
                Revocation::Revoked(at) => println!("token {id} revoked at {}", rfc3339(at)),
                Revocation::AlreadyRevoked(at) => {
                    println!("token {id} was already revoked at {}", rfc3339(at));
                }
                Revocation::Unknown => return Err(format!("no token has the id {id}")),
            }
        }
    }
    Ok(())
}

/// The account an ACCOUNT argument names: the one with this id, else the
/// only one with this name.
async fn resolve(store: &Db, selector: &str) -> Result<AccountSummary, String> {
    let found = store
        .find_accounts(selector)
        .await
        .map_err(|e| format!("cannot read the accounts: {e}"))?;
    pick(found, selector)
}

fn pick(found: Vec<AccountSummary>, selector: &str) -> Result<AccountSummary, String> {
    if let Some(by_id) = found.iter().find(|a| a.id.0.to_string() == selector) {
        return Ok(by_id.clone());
    }
    match <[AccountSummary; 1]>::try_from(found) {
        Ok([one]) => Ok(one),
        Err(found) if found.is_empty() => Err(format!(
            "no account has the id or name {selector:?} (see `account list`)"
        )),
        Err(found) => Err(format!(
            "{} accounts are named {selector:?}: give one's id instead (see `account list`)",
            found.len()
        )),
    }
}

/// Demo mode at start-up: its own accounts (found by their mark, created
/// the first time), the previous start's tokens revoked, new ones made.
/// The tokens go to stdout only, never to the log.
pub async fn start_demo(store: &Db) -> Result<DemoAccounts, String> {
    let tokens = DEMO_ACCOUNTS
        .iter()
        .map(|_| new_token())
        .collect::<Result<Vec<_>, _>>()?;
    let accounts: Vec<DemoAccount<'_>> = DEMO_ACCOUNTS
        .iter()
        .zip(&tokens)
        .map(|((slot, name), token)| DemoAccount {
            slot: *slot,
            name,
            token: token.hash(),
        })
        .collect();
    let (ids, revoked): (Vec<AccountId>, u64) = store
        .start_demo(&accounts)
        .await
        .map_err(|e| format!("cannot set up the demo accounts: {e}"))?;
    info!(
        accounts = ?ids.iter().map(|id| id.0.to_string()).collect::<Vec<_>>(),
        revoked,
        "demo mode: the demo accounts' previous tokens are revoked; serving the page at / and the new tokens at /demo/tokens"
    );
    let mut list = Vec::with_capacity(tokens.len());
    for ((_, name), token) in DEMO_ACCOUNTS.iter().zip(&tokens) {
        println!("{name} account token: {}", token.reveal());
        list.push(((*name).to_owned(), token.reveal().to_owned()));
    }
    Ok(DemoAccounts(list))
}

fn new_token() -> Result<NewToken, String> {
    NewToken::generate().map_err(|e| format!("no randomness: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::UnixMillis;
    use uuid::Uuid;

    fn account(name: &str) -> AccountSummary {
        AccountSummary {
            id: AccountId(Uuid::new_v4()),
            name: name.into(),
            created_at: UnixMillis(0),
            active_tokens: 1,
            demo: false,
        }
    }

    #[test]
    fn an_id_wins_and_a_name_must_be_unique() {
        let a = account("shop");
        assert_eq!(pick(vec![a.clone()], "shop"), Ok(a.clone()));
        let id = a.id.0.to_string();
        let other = account(&id);
        assert_eq!(pick(vec![a.clone(), other], &id), Ok(a.clone()));
        let twice = pick(vec![a.clone(), account("shop")], "shop").unwrap_err();
        assert!(twice.contains("2 accounts are named"), "{twice}");
        let none = pick(Vec::new(), "nobody").unwrap_err();
        assert!(none.contains("no account"), "{none}");
    }
}
