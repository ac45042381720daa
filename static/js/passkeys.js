// Passkeys (dashboard/passkeys.py): "Sign in with a passkey" on the sign-in page puts
// the passkey's answer in the form, which posts it with the username and password;
// "Add a passkey" on the profile enrols one. The ceremonies are the browser's
// (navigator.credentials); the checks are the server's (django-otp-webauthn).
(function () {
  "use strict";

  function post(url, form, body) {
    const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": token, "Content-Type": "application/json" },
      body: body || "{}",
    });
  }

  async function signIn(button, form, say) {
    if (!form.reportValidity()) return;
    const answer = await post(button.dataset.options, form);
    if (!answer.ok) throw new Error("options " + answer.status);
    const options = PublicKeyCredential.parseRequestOptionsFromJSON(await answer.json());
    const credential = await navigator.credentials.get({ publicKey: options });
    form.querySelector("input[name=passkey]").value = JSON.stringify(credential.toJSON());
    const code = form.querySelector("input[name=otp_token]");
    if (code) code.value = "";
    say("Signing in…");
    form.submit();
  }

  async function enrol(button, form, say) {
    const begun = await post(button.dataset.begin, form);
    if (!begun.ok) {
      say((await begun.json()).detail || "The passkey could not be added.");
      return;
    }
    const options = PublicKeyCredential.parseCreationOptionsFromJSON(await begun.json());
    const credential = await navigator.credentials.create({ publicKey: options });
    const done = await post(button.dataset.complete, form, JSON.stringify(credential.toJSON()));
    if (done.ok) {
      window.location.assign(button.dataset.done);
    } else {
      say((await done.json()).detail || "The passkey could not be added.");
    }
  }

  document.addEventListener("click", async function (event) {
    const button = event.target.closest("button[data-passkey]");
    if (!button) return;
    event.preventDefault();
    const form = button.closest("form");
    const status = document.getElementById(button.dataset.status);
    const say = function (text) {
      if (status) status.textContent = text;
    };
    if (!window.PublicKeyCredential || !PublicKeyCredential.parseRequestOptionsFromJSON) {
      say("This browser cannot use passkeys: use the code from your authenticator app.");
      return;
    }
    try {
      if (button.dataset.passkey === "sign-in") await signIn(button, form, say);
      else await enrol(button, form, say);
    } catch (error) {
      say("No passkey was used (" + (error.name || "error") + "). Try again, or use the code.");
    }
  });
})();
