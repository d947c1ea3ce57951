// Lists: the header checkbox ticks or clears every job of the page.
"use strict";
(function () {
    const all = document.querySelector("[data-select-all]");
    if (!all) {
        return;
    }
    all.addEventListener("change", function () {
        for (const box of document.querySelectorAll("input.action-select")) {
            box.checked = all.checked;
        }
    });
})();
