// The demo's service worker (a module worker): Background Sync finishes the
// operations that waited for the network after every tab of the shop was
// closed. It only handles `sync`; it intercepts no request.
//
// Each operation is sent only with the credentials of the account that
// created it: one IdempotentClient per account the page left credentials
// for, with that account's scope (the account's id from GET /account, never
// its token, a typed name or a literal). Operations of
// other accounts stay held. The saved tokens go stale when the demo server
// restarts (it issues new ones): the 401 then holds the operation with its
// key (`needs-auth`) and the next page load, which reads the new tokens,
// sends it again. Each client reads the server's replay window from its
// contract, as the page's does.
import { IdempotentClient } from "./pkg/idempotent-client.js";
import { SYNC_TAG, loadAccounts } from "./worker-accounts.js";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("sync", (event) => {
  if (event.tag === SYNC_TAG) event.waitUntil(finishPending());
});

async function finishPending() {
  const accounts = await loadAccounts();
  await Promise.all(
    accounts.map(async (account) => {
      const client = await IdempotentClient.create({
        scope: account.scope,
        headers: () => ({ Authorization: `Bearer ${account.token}` }),
        // A purchase the server accepts (202) stays in the store for the
        // page, which polls it and shows its end; the worker does not poll.
        // Lookups take the core's path per operation (a purchase's key is
        // looked up as a purchase).
        pollAccepted: false,
      });
      // Waits for the lock of an operation a page is still sending, then
      // finds it finished there.
      await client.resumePending();
    }),
  );
}
