// The refresh control of the dashboard and of a job's page: fetch the part of the page again (same origin,
// server-rendered and escaped) and swap it in, on a click or every N seconds while the box is ticked (a
// job's page ticks it for a waiting or running job). A part that carries data-refresh-stop (a finished
// job) ends the refreshing, as does a job that is gone. No dependency, no network but ours.
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

    function stop(message) {
        clearInterval(timer);
        timer = null;
        auto.checked = false;
        auto.disabled = true;
        status.textContent = message;
    }

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
            if (response.status === 404) {  // a job deleted (or cancelled before it ran)
                stop("It is not in the store any more: refreshing stopped.");
                return;
            }
            if (response.redirected) {  // to the login page, or a job that no longer reads
                stop("The page moved (logged out?): refreshing stopped; reload the page.");
                return;
            }
            if (!response.ok) {
                throw new Error("HTTP " + response.status);
            }
            target.innerHTML = await response.text();
            const finished = target.querySelector("[data-refresh-stop]");
            if (finished) {
                stop(finished.dataset.refreshStop);
            } else {
                status.textContent = "Updated at " + new Date().toLocaleTimeString() + ".";
            }
        } catch (error) {
            status.textContent = "Refresh failed (" + error.message + "); the numbers shown are older.";
        } finally {
            busy = false;
        }
    }

    function follow() {
        clearInterval(timer);
        timer = auto.checked ? setInterval(refresh, Number(auto.value) * 1000) : null;
    }

    control.querySelector("[data-refresh-now]").addEventListener("click", refresh);
    auto.addEventListener("change", follow);
    follow();  // ticked when the page came (or as the browser restored it)
})();
