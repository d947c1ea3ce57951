// The dashboard's refresh control: fetch the panels again (same origin, server-rendered and escaped) and
// swap them in, on a click or every N seconds while the box is ticked. No dependency, no network but ours.
"use strict";
(function () {
    const control = document.querySelector("[data-refresh-url]");
    if (!control) {
        return;
    }
    const target = document.getElementById(control.dataset.refreshTarget);
    const status = control.querySelector("[data-refresh-status]");
    const auto = control.querySelector("[data-refresh-auto]");
    let timer = null;
    let busy = false;

    async function refresh() {
        if (busy) {
            return;
        }
        busy = true;
        try {
            const response = await fetch(control.dataset.refreshUrl, {
                credentials: "same-origin",
                headers: {"X-Requested-With": "XMLHttpRequest"},
            });
            if (!response.ok) {
                throw new Error("HTTP " + response.status);
            }
            target.innerHTML = await response.text();
            status.textContent = "Updated at " + new Date().toLocaleTimeString() + ".";
        } catch (error) {
            status.textContent = "Refresh failed (" + error.message + "); the numbers shown are older.";
        } finally {
            busy = false;
        }
    }

    control.querySelector("[data-refresh-now]").addEventListener("click", refresh);
    auto.addEventListener("change", function () {
        clearInterval(timer);
        timer = auto.checked ? setInterval(refresh, Number(auto.value) * 1000) : null;
    });
})();
