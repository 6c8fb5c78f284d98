// The page's own start: a host of <tidings-inbox>, the element any page can
// use. The token travels in the fragment (browsers never send a fragment to
// the server, so it stays out of access logs and Referer headers) and is taken
// out of the address at once, so it stays out of the history too. The page
// talks to the server that served it and to no other origin.
import "./tidings-inbox.js";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
if (location.hash) history.replaceState(null, "", location.pathname + location.search);
if (!token) {
  document.getElementById("hint").hidden = false;
} else {
  const element = document.createElement("tidings-inbox");
  element.id = "inbox";
  element.setAttribute("open", "");
  element.getToken = () => token;
  element.addEventListener("tidings:ready", (e) => {
    window.tidingsInbox = e.detail.inbox;
  }, { once: true });
  document.getElementById("inbox").replaceWith(element);
}
