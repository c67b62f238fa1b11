// The demo accounts where the service worker can read them (IndexedDB;
// it cannot read localStorage). Demo only: a real app would rather use
// cookie credentials, which a service worker's fetch sends by itself, or
// its own token store.
const DB = "idemkey-demo";
/** The Background Sync tag of the demo's operations (sw.js handles it). */
export const SYNC_TAG = "idemkey";
const STORE = "accounts";

function open() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "name" });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** Keeps [{name, token, scope}] for the service worker (scope: the account's id from GET /account, stable across restarts). */
export async function saveAccounts(accounts) {
  const db = await open();
  const tx = db.transaction(STORE, "readwrite");
  tx.objectStore(STORE).clear();
  for (const { name, token, scope } of accounts) tx.objectStore(STORE).put({ name, token, scope });
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = () => reject(tx.error);
  });
  db.close();
}

/** [{name, token, scope}] as the page saved them. */
export async function loadAccounts() {
  const db = await open();
  const req = db.transaction(STORE, "readonly").objectStore(STORE).getAll();
  const accounts = await new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  db.close();
  return accounts;
}
