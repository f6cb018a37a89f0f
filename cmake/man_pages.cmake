# Manual pages for the three binaries, generated at build time from their --help output
# (cmake/man_page.cmake) and installed gzipped under <prefix>/share/man/man1 with the binaries' package
# components: fabricmon-agent.1 → agent, fabricmon-aggregator.1 → aggregator, fabricmon.1 → cli.
include_guard(GLOBAL)
include(GNUInstallDirs)

set(_fm_man_dir "${PROJECT_BINARY_DIR}/man")
set(_fm_man_pages "")
foreach(_fm_entry "fabricmon-agent:agent" "fabricmon-aggregator:aggregator" "fabricmon:cli")
  string(REPLACE ":" ";" _fm_entry "${_fm_entry}")
  list(GET _fm_entry 0 _fm_program)
  list(GET _fm_entry 1 _fm_component)
  set(_fm_see "fabricmon-agent(1) fabricmon-aggregator(1) fabricmon(1)")
  string(REPLACE "${_fm_program}(1)" "" _fm_see "${_fm_see}")
  string(REGEX REPLACE "  +" " " _fm_see "${_fm_see}")
  string(STRIP "${_fm_see}" _fm_see)
  set(_fm_page "${_fm_man_dir}/${_fm_program}.1")
  add_custom_command(OUTPUT "${_fm_page}" "${_fm_page}.gz"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_fm_man_dir}"
    COMMAND ${CMAKE_COMMAND} "-DFM_BINARY=$<TARGET_FILE:${_fm_program}>" "-DFM_OUTPUT=${_fm_page}"
            "-DFM_SEE_ALSO=${_fm_see}" -P "${PROJECT_SOURCE_DIR}/cmake/man_page.cmake"
    DEPENDS ${_fm_program} "${PROJECT_SOURCE_DIR}/cmake/man_page.cmake"
    COMMENT "fabricmon: manual page ${_fm_program}.1"
    VERBATIM)
  list(APPEND _fm_man_pages "${_fm_page}")
  install(FILES "${_fm_page}.gz" DESTINATION "${CMAKE_INSTALL_MANDIR}/man1"
          COMPONENT ${_fm_component})
endforeach()
add_custom_target(fabricmon_man_pages ALL DEPENDS ${_fm_man_pages})
