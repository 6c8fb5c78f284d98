// The page's own start: the token travels in the fragment (browsers never
// send a fragment to the server, so it stays out of access logs and Referer
// headers) and is taken out of the address at once, so it stays out of the
// history too. The page talks to the server that served it and to no other
// origin (a host page on another origin mounts the inbox with `mountInbox`).
import { mountInbox } from "./inbox.js";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
if (location.hash) history.replaceState(null, "", location.pathname + location.search);
if (!token) {
  document.getElementById("hint").hidden = false;
} else {
  const element = document.getElementById("inbox");
  window.tidingsInbox = await mountInbox(element, {
    baseUrl: location.origin,
    getToken: () => token,
    open: true,
  });
}
